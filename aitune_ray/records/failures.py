"""One rule for what a failure was: the status a raised exception (or a lost worker) gives a task
(classify), and the one translation from how a task ended to a result's status and message (outcome).

Ray's exceptions are recognized by their class names and module, so this file imports no Ray: a worker
that dies, is killed or runs out of memory raises one of those on the driver, and an exception raised
inside a task arrives wrapped, with the task's own exception as its ``cause``.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

from aitune_ray.records.results import CANCELLED, CRASHED, ERROR, OOM, TIMED_OUT

#: Ray exceptions that mean the worker process is gone (its actor must be replaced).
WORKER_LOST = frozenset({"RayActorError", "ActorDiedError", "WorkerCrashedError", "OutOfMemoryError",
                         "NodeDiedError", "ActorUnschedulableError", "ActorUnavailableError",
                         "LocalRayletDiedError"})
#: Words of a message that says memory ran out (Ray's memory monitor names itself; the generic "worker
#: died" text only lists the OOM killer among possible causes, which is not evidence).
OOM_WORDS = ("out of memory", "memory monitor", "low on memory", "outofmemory")


def _from_ray(exc: BaseException, names: frozenset | set) -> bool:
    return any(cls.__module__.startswith("ray") and cls.__name__ in names for cls in type(exc).__mro__)


def is_oom(exc: BaseException) -> bool:
    """True when exc says that memory ran out: on the GPU, on the host, or Ray's memory monitor."""
    import torch

    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or _from_ray(exc, {"OutOfMemoryError"}):
        return True
    text = str(exc).lower()
    return any(word in text for word in OOM_WORDS)


def short(text, limit: int = 400) -> str:
    """One line of at most limit characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."


@dataclasses.dataclass
class Failure:
    """status: a results status. worker_lost: the process that ran the task is gone (replace it).
    cause: the task's own exception (unwrapped from Ray's). error: a one-line description."""

    status: str
    worker_lost: bool
    cause: BaseException
    error: str

    @property
    def error_type(self) -> str:
        return type(self.cause).__name__


def classify(exc: BaseException) -> Failure:
    """The one mapping from an exception (the task's own, or Ray's about the task) to a status."""
    if _from_ray(exc, WORKER_LOST):
        status = OOM if is_oom(exc) else CRASHED
        what = "ran out of memory" if status == OOM else "died"
        return Failure(status, True, exc, f"the worker process {what} ({short(exc)})")
    if _from_ray(exc, {"TaskCancelledError"}):
        return Failure(CANCELLED, False, exc, short(exc))
    cause = getattr(exc, "cause", None) if _from_ray(exc, {"RayError"}) else None
    cause = cause if isinstance(cause, BaseException) else exc
    status = OOM if is_oom(cause) else ERROR
    return Failure(status, False, cause, f"{type(cause).__name__}: {short(cause, 2000)}")


class NotRun(Exception):
    """A task that never ran (no worker was left for it, or its executor was closed first)."""


def outcome(what: str, *, exc: BaseException | None = None, failure: Failure | None = None,
            timed_out: bool = False, limit_s: float | None = None, limit_name: str = "", replaced: bool = False,
            log_path: str = "", unrun: str | None = None) -> Failure | None:
    """The one translation from how a task ended to a result's status, error type and one-line error.

    what: the task in words ("build", "the build of B", "the forge benchmark of flash on sdpa"); exc: an
    exception the task's own code raised in this process; failure: classify()'s reading of an exception that
    came back from a worker; timed_out: the task gave no result within limit_s seconds (limit_name: the
    setting that set it, e.g. "task_timeout_s"; replaced: its worker was killed and replaced for it);
    log_path: the worker's log, whose fatal line a lost worker's message quotes; unrun: why the task never
    ran. None when the task ended without a failure."""
    if unrun is not None:
        error = f"{what} did not run: {unrun}"
        return Failure(ERROR, False, NotRun(error), error)
    if timed_out:
        setting = f"{limit_name}=" if limit_name else ""
        limit = f" within {setting}{limit_s:g} s" if limit_s is not None else " within its time limit"
        error = f"{what} gave no result{limit}" + ("; its worker was killed and replaced" if replaced else "")
        return Failure(TIMED_OUT, replaced, TimeoutError(error), error)
    if exc is not None:
        failure = classify(exc)
    if failure is None:
        return None
    if failure.worker_lost:
        hint = log_hint(log_path) if log_path else ""
        lost = "ran out of memory" if failure.status == OOM else "died"
        return Failure(failure.status, True, failure.cause, f"the worker process {lost} during {what}"
                       f"{': ' + hint if hint else ''} ({short(failure.cause)})")
    return Failure(failure.status, False, failure.cause, f"{what} failed: {failure.error}")


class ProcessLost(Exception):
    """A process that ran a task ended without a result (its exit status or signal says how)."""


def lost_process(returncode: int | None, timed_out: bool, timeout_s: float, log_path: str = "") -> Failure:
    """The status of a task whose own process (a build's child process) gave no result: killed at its
    timeout, else it died (crashed, or ran out of memory when its log says so), as a Ray worker does."""
    if timed_out:
        return outcome("the build", timed_out=True, limit_s=timeout_s, replaced=True)
    if returncode is not None and returncode < 0:
        import signal

        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with code {returncode} and no result"
    hint = log_hint(log_path) if log_path else ""
    tail = _log_tail(log_path) if log_path and not hint else ""
    cause = ProcessLost(f"the process {how}" + (f": {hint}" if hint else f" ({tail})" if tail else ""))
    status = OOM if is_oom(cause) else CRASHED
    return Failure(status, True, cause, f"the build process {how}" + (f": {hint}" if hint else "")
                   + (f" ({tail})" if tail else "") + (f"; log: {log_path}" if log_path else ""))


def _log_tail(path: str) -> str:
    """The last line of a log that says something (an exception's last line), when readable."""
    try:
        lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return short(lines[-1], 300) if lines else ""


def log_hint(path: str) -> str:
    """The fatal line a dying worker left in its log, when the log is readable from here."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    fatal = [line for line in lines if "Fatal Python error" in line]
    return fatal[-1].strip() if fatal else ""


def pack_exception(exc: BaseException | None) -> bytes | None:
    """A worker's exception as bytes for the driver (None when it cannot be pickled): the driver then
    raises what an in-process build would have raised."""
    if exc is None:
        return None
    try:
        return pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - a local class or an unpicklable argument: the text still travels
        return None


def revive_exception(blob: bytes | None) -> BaseException | None:
    """The exception pack_exception packed, or None when this process cannot recreate it."""
    if not blob:
        return None
    try:
        exc = pickle.loads(blob)
    except Exception:  # noqa: BLE001 - its class does not exist here
        return None
    return exc if isinstance(exc, BaseException) else None
