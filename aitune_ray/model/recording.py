"""Recording sessions: which wrapped modules a function reached, and the states a wrapped module is in."""

from __future__ import annotations

import contextlib
import enum
import threading
from typing import Any

_sessions = threading.local()


class ModuleState(str, enum.Enum):
    RECORDING = "recording"   # calls run eagerly and are recorded
    TUNED = "tuned"           # calls go to the chosen backend
    EAGER = "eager"           # calls run eagerly (tuning kept eager, or failed)


@contextlib.contextmanager
def recording_session():
    """Collects every wrapped Module called inside it, in order of first call."""
    stack = getattr(_sessions, "stack", None)
    if stack is None:
        stack = _sessions.stack = []
    reached: list = []   # the wrapped Modules, in order of first call
    stack.append(reached)
    try:
        yield reached
    finally:
        stack.pop()


def note_call(module: Any) -> None:
    """A wrapped module was called: the innermost open session on this thread notes it (once)."""
    stack = getattr(_sessions, "stack", None)
    if stack and module not in stack[-1]:
        stack[-1].append(module)
