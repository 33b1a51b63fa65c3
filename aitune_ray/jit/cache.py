"""Decisions kept between runs: a module's verdict, found again by its fingerprint.

A module's folder under cache_dir is named by the fingerprint of what the verdict depends on besides the inputs:
its class, its parameters' and buffers' names, shapes, dtypes and values (a digest), the versions of Python,
torch and aitune_ray, and the device kind. In it, decision.json names the input signatures the verdict was made
on and the verdict ("tuned": module.ait beside it, a checkpoint in the project's format; "eager"). A call whose
signature is one of them loads the verdict instead of tuning; anything else misses. A checkpoint loads with
the loader's own guarantees: nothing unpickled, no class imported, native code only when allowed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
from pathlib import Path
from typing import Any

import torch

from aitune_ray.checkpoint import load, save
from aitune_ray.model.samples import describe
from aitune_ray.runtime.files import read_regular, write_atomic
from aitune_ray.version import __version__

logger = logging.getLogger(__name__)

DECISION = "decision.json"
CHECKPOINT = "module.ait"
TUNED, EAGER = "tuned", "eager"
MAX_DECISION_BYTES = 1 << 20


def device_kind(device: torch.device) -> str:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{torch.cuda.get_device_name(index)}"
    return device.type


def module_fingerprint(module: torch.nn.Module, device: torch.device) -> str:
    """What a verdict depends on besides the inputs, as a hex digest (see the module docstring)."""
    digest = hashlib.sha256()
    cls = type(module)
    head = {"class": f"{cls.__module__}.{cls.__qualname__}", "python": platform.python_version(),
            "torch": torch.__version__, "aitune_ray": __version__, "device": device_kind(device)}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        digest.update(f"{name}:{list(tensor.shape)}:{tensor.dtype}".encode())
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        digest.update(data.contiguous().view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()[:32]


def call_signature(args: tuple, kwargs: dict) -> str:
    return json.dumps({"args": describe(args), "kwargs": describe(kwargs)}, sort_keys=True, default=str)


class DecisionCache:
    """The decisions under one folder (None: nothing kept)."""

    def __init__(self, root: Path | str | None, allow_native_code: bool = False):
        self.root = Path(root) if root is not None else None
        self.allow_native_code = allow_native_code

    def lookup(self, fingerprint: str, signatures: list[str]) -> dict | None:
        """The decision made for this module on calls with these signatures (each among its own), or None."""
        if self.root is None:
            return None
        path = self.root / fingerprint / DECISION
        try:
            decision = json.loads(read_regular(path, MAX_DECISION_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("JIT cache: %s cannot be read (%s); tuning again", path, exc)
            return None
        if not isinstance(decision, dict) or not set(signatures) <= set(decision.get("signatures", [])):
            return None
        return decision

    def restore(self, fingerprint: str, wrapper: Any) -> bool:
        """Load the cached checkpoint into wrapper (an aitune_ray.Module); False (logged) when it cannot."""
        path = self.root / fingerprint / CHECKPOINT
        try:
            load(wrapper, path, allow_native_code=self.allow_native_code)
        except Exception as exc:  # noqa: BLE001 - any failure is a miss: the module is tuned again
            logger.warning("JIT cache: %s not loaded (%s: %s); tuning again", path, type(exc).__name__, exc)
            return False
        return True

    def store(self, fingerprint: str, wrapper: Any, signatures: list[str], verdict: str) -> Path | None:
        """Keep the verdict on wrapper (tuned: its checkpoint) for calls with these signatures."""
        if self.root is None:
            return None
        folder = self.root / fingerprint
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if verdict == TUNED:
                save(wrapper, folder / CHECKPOINT)
            backend = wrapper.backend.describe() if wrapper.backend is not None else "eager"
            decision = {"verdict": verdict, "module": wrapper.name, "backend": backend,
                        "signatures": sorted(set(signatures)),
                        "fingerprint": hashlib.sha256((fingerprint + "".join(sorted(set(signatures))))
                                                      .encode()).hexdigest()[:32]}
            write_atomic(folder / DECISION, json.dumps(decision, indent=1, sort_keys=True))
        except Exception as exc:  # noqa: BLE001 - the program goes on; the next run tunes again
            logger.warning("JIT cache: the decision on %s not kept (%s: %s)", wrapper.name, type(exc).__name__, exc)
            return None
        return folder
