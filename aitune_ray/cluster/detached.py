"""DetachedBackend: a backend built on a worker for a device this driver does not have.

RayExecutor.materialize returns one when the chosen candidate ran on CUDA but the driver has no CUDA
GPU (a CPU head node tuning for GPU workers). It cannot run inference; it carries what a checkpoint
needs: the original backend's spec (type and config), its exported state and its artifact files, so
``aitune_ray.save`` writes the same checkpoint the real backend would, and ``aitune_ray.load`` on a
GPU machine restores the real backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aitune_ray.backend.backend import Backend, BackendState, import_class
from aitune_ray.errors import BuildError
from aitune_ray.records.results import BuildResult


class DetachedBackend(Backend):
    def __init__(self, result: BuildResult, files: dict[str, Path]):
        # No Backend.__init__: the config belongs to the original class, not to this one.
        self.target = import_class(result.spec["type"], Backend)
        self.config = self.target.config_class.from_dict(dict(result.spec.get("config") or {}))
        self.is_jit = self.target.is_jit
        self.default_tolerance = self.target.default_tolerance
        self.state = BackendState.ACTIVE
        self.device = torch.device(result.device or "cuda")
        self.result_key, self.node, self.gpu = result.key, result.node, result.gpu
        self._spec = dict(result.spec)
        self._exported_state = dict(result.state or {})
        self._files = {name: Path(path) for name, path in files.items()}

    @property
    def name(self) -> str:
        return self.target.__name__

    def spec(self) -> dict:
        return dict(self._spec)

    def export(self) -> tuple[dict, dict[str, Path]]:
        return dict(self._exported_state), ({} if self.is_jit else dict(self._files))

    def infer(self, *args: Any, **kwargs: Any) -> Any:
        raise BuildError(
            f"{self.name} was built for {self.device} on {self.node or 'a worker'} ({self.gpu}), and this "
            "process has no CUDA GPU to run it: save it with aitune_ray.save(...) and load the checkpoint "
            "on a machine with a GPU")

    __call__ = infer

    def restore(self, *args: Any, **kwargs: Any) -> "Backend":
        raise BuildError("a DetachedBackend is restored through its checkpoint, as the original backend")

    def _build(self, *args: Any, **kwargs: Any) -> None:
        raise BuildError("a DetachedBackend is never built")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.infer(*args, **kwargs)
