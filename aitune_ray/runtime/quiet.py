"""Other libraries' warnings that a user cannot act on, silenced narrowly: only the messages listed here,
only around the call that causes them, so that any other warning of theirs still reaches the user.

    with quiet("onnx export"):
        torch.onnx.export(...)
    torchao = import_quietly("torchao")
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import warnings
from typing import Any, Iterator

#: What each call says that nothing a user does changes: (warning category, message pattern) and
#: (logger name, message pattern).
NOISE: dict[str, dict[str, list]] = {
    # torchao's import: its optional CUDA kernels that this torch cannot load (the quantizers used here do not
    # need them), and torch's deprecation of its Enum registrations, which torchao makes
    "import torchao": {"warnings": [], "logs": [
        ("torchao", r"Failed to load .*_C.*\.so"),
        ("torchao.kernel.intmm", r"Detected no triton"),
        ("torch.utils._pytree", r"is an Enum subclass and is now natively supported")]},
    # torch.onnx.export(dynamo=True): dynamic_axes is what this exporter is given on purpose (it names the
    # batch axis for both exporters), torchvision's operators are absent, and a _pytree deprecation that
    # torch's own exporter triggers
    "onnx export": {"warnings": [
        (UserWarning, r"(?s).*'dynamic_axes' is not recommended when dynamo=True"),
        (Warning, r"from_dynamic_axes_to_dynamic_shapes is deprecated"),
        (FutureWarning, r"(?s).*isinstance\(treespec, LeafSpec\)` is deprecated")], "logs": [
        ("torch.onnx._internal.exporter._registration", r"torchvision is not installed"),
        ("torch.utils._pytree", r"is an Enum subclass and is now natively supported")]},
}
#: Modules whose import is noisy, by the NOISE entry to silence it with.
IMPORTS = {"torchao": "import torchao"}


class _Drop(logging.Filter):
    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


@contextlib.contextmanager
def quiet(call: str) -> Iterator[None]:
    """Silence what NOISE lists for call, for the duration of the block."""
    noise = NOISE[call]
    filters = [(logging.getLogger(name), _Drop(pattern)) for name, pattern in noise["logs"]]
    for logger, dropped in filters:
        logger.addFilter(dropped)
    try:
        with warnings.catch_warnings():
            for category, pattern in noise["warnings"]:
                warnings.filterwarnings("ignore", message=pattern, category=category)
            yield
    finally:
        for logger, dropped in filters:
            logger.removeFilter(dropped)


def import_quietly(name: str) -> Any:
    """importlib.import_module(name), with the noise of its top package's first import silenced."""
    call = IMPORTS.get(name.partition(".")[0])
    if call is None:
        return importlib.import_module(name)
    with quiet(call):
        return importlib.import_module(name)
