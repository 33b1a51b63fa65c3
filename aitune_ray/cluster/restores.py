"""Restores: candidates' backends restored on the driver from their results: for the confirm session on the
driver (kept, so that materialize() deploys the very objects it timed) and for materialize(). A part of
RayExecutor (aitune_ray.cluster.ray_executor); it needs nothing of the executor.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

import aitune_ray.records.artifacts as artifacts
from aitune_ray.backend.backend import Backend
from aitune_ray.cluster.detached import DetachedBackend
from aitune_ray.records.results import BuildResult
from aitune_ray.worker.seam import TuneContext

logger = logging.getLogger(__name__)


class Restores:
    """The backends restored on this driver, by (module name, result key)."""

    def __init__(self):
        self._held: dict[tuple[str, str], Backend] = {}   # finalists restored here by a confirm session

    def held(self, context: TuneContext, result: BuildResult) -> Backend:
        """result's backend restored on this driver (once per module; materialize() hands out the same one)."""
        key = (context.name, result.key)
        if key not in self._held:
            self._held[key] = restore(context, result)
        backend = self._held[key]
        backend.activate()
        return backend

    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        """The backend the confirm session timed on this driver, where it ran here; else restored now."""
        held = self._held.pop((context.name, result.key), None)
        if held is not None:
            held.activate()
            return held
        return restore(context, result)

    def drop(self, name: str) -> None:
        """Deactivate and forget module name's backends."""
        for key in [k for k in self._held if k[0] == name]:
            self._held.pop(key).deactivate()


def restore(context: TuneContext, result: BuildResult) -> Backend:
    """result's backend restored on this driver; a DetachedBackend when it ran on CUDA and the driver has none."""
    where = Path(context.workdir) / "materialized" / result.key
    files = artifacts.fetch(result.artifacts, where / "artifacts")
    if result.device.startswith("cuda") and not torch.cuda.is_available():
        logger.warning("[%s] %s ran on %s, and this driver has no CUDA GPU: it can be saved to a checkpoint "
                       "but not called here", context.name, result.backend, result.gpu)
        return DetachedBackend(result, files)
    device = torch.device("cpu")
    if result.device.startswith("cuda"):
        device = context.device if torch.device(context.device).type == "cuda" else torch.device("cuda")
    backend = Backend.from_spec(result.spec)
    backend.restore(context.module, result.state, files, device, where)
    backend.activate()
    return backend


def outbound(context: TuneContext, result: BuildResult) -> dict:
    """A result's artifacts as a worker can read them: files this driver wrote travel as bytes."""
    workdir = Path(context.workdir).resolve()
    sent = {}
    for name, value in result.artifacts.items():
        if isinstance(value, str) and not artifacts.is_url(value) and workdir in Path(value).resolve().parents:
            sent[name] = Path(value).read_bytes()
        else:
            sent[name] = value
    return sent
