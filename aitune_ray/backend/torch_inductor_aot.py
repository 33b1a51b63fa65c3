"""TorchInductorAotBackend: torch.export, then an AOTInductor package loaded with aoti_load_package.

What is exported is backend.flat_call's tensors-only wrapper: the package takes the call's tensor leaves and
holds its non-tensor arguments as constants; a call with other values runs eagerly (backend.baked_call)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig
from aitune_ray.backend.baked_call import BakedCall
from aitune_ray.backend.flat_call import FlatExport, dynamic_shapes, prepare
from aitune_ray.backend.torch_inductor_jit import SAFE_INDUCTOR_OPTIONS
from aitune_ray.model.samples import SampleStore, map_structure


@dataclasses.dataclass
class TorchInductorAotBackendConfig(BackendConfig):
    """inductor_configs: torch._inductor.config values for aoti_compile_and_package.
    dynamic_batch: export the leading dimension as dynamic when several batch sizes were recorded."""

    safe_fields = {"inductor_configs": SAFE_INDUCTOR_OPTIONS, "dynamic_batch": SAFE}

    inductor_configs: dict | None = None
    dynamic_batch: bool = True


def export_program(module: nn.Module, samples: SampleStore, dynamic_batch: bool = True) -> tuple[Any, FlatExport]:
    """torch.export of backend.flat_call's tensors-only wrapper of module on its largest recorded call, the
    leading axis of its batch tensors dynamic when the samples it serves hold several batch sizes. Returns
    (ExportedProgram, the FlatExport)."""
    flat = prepare(module, samples)
    shapes = dynamic_shapes(flat.batch_axes(torch.export.Dim.AUTO)) if dynamic_batch else None
    return torch.export.export(flat.module, tuple(flat.leaves), dynamic_shapes=shapes), flat


class TorchInductorAotBackend(Backend):
    config_class = TorchInductorAotBackendConfig
    is_jit = False
    build_cost = 4.0    # export, then a whole AOTInductor compile and package (about 60 s for an 8 x 4096 MLP)

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        program, flat = export_program(module, samples, self.config.dynamic_batch)
        self._call = BakedCall(self.name, module, flat.call, outputs=flat.outputs)
        self._package = Path(workdir) / "model.pt2"
        torch._inductor.aoti_compile_and_package(program, package_path=str(self._package),
                                                 inductor_configs=self.config.inductor_configs or {})
        self._runner = self._open(self._package, device)

    @staticmethod
    def _open(package: Path, device: torch.device):
        index = device.index if device.type == "cuda" and device.index is not None else -1
        return torch._inductor.aoti_load_package(str(package), device_index=index)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._call.run(args, kwargs, self._runner)   # other non-tensor arguments: eager (baked_call)

    def _state(self) -> dict:
        return {"call": self._call.to_data()}

    def _artifacts(self) -> dict[str, Path]:
        return {"model.pt2": self._package}

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        self._call = BakedCall.from_data(self.name, module, (state or {}).get("call"))
        self._package = Path(artifacts["model.pt2"])
        self._runner = self._open(self._package, device)


__all__ = ["TorchInductorAotBackend", "TorchInductorAotBackendConfig", "export_program", "map_structure"]
