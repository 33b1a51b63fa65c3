"""TorchInductorAotBackend: torch.export, then an AOTInductor package loaded with aoti_load_package.

The package holds the recorded call's non-tensor arguments as constants: a call with other values runs
eagerly (backend.baked_call)."""

from __future__ import annotations

import inspect

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig
from aitune_ray.backend.baked_call import BakedCall
from aitune_ray.backend.torch_inductor_jit import SAFE_INDUCTOR_OPTIONS
from aitune_ray.model.calls import CallForm, bound_samples
from aitune_ray.model.samples import SampleStore, map_structure


@dataclasses.dataclass
class TorchInductorAotBackendConfig(BackendConfig):
    """inductor_configs: torch._inductor.config values for aoti_compile_and_package.
    dynamic_batch: export the leading dimension as dynamic when several batch sizes were recorded."""

    safe_fields = {"inductor_configs": SAFE_INDUCTOR_OPTIONS, "dynamic_batch": SAFE}

    inductor_configs: dict | None = None
    dynamic_batch: bool = True


def batch_dynamic_shapes(module: nn.Module, args: tuple, kwargs: dict, batch_size: int, dim: Any) -> dict:
    """torch.export dynamic_shapes marking dim 0 of batch tensors, keyed as torch.export matches them: by
    forward's parameter names, keywords that forward takes through ``**kwargs`` in one dict under its name."""
    def spec(t: torch.Tensor):
        return {0: dim} if t.dim() > 0 and t.shape[0] == batch_size else None

    def walk(obj):
        if isinstance(obj, torch.Tensor):
            return spec(obj)
        if isinstance(obj, (tuple, list)):
            return type(obj)(walk(v) for v in obj)
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        return None

    params = inspect.signature(module.forward).parameters
    positional = [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(positional):   # extra positional items: torch.export's own positional form
        return tuple(walk(a) for a in args) + tuple(walk(v) for v in kwargs.values())
    shapes = {name: walk(a) for name, a in zip(positional, args)}
    var_keyword = next((n for n, p in params.items() if p.kind is p.VAR_KEYWORD), None)
    extra = {}
    for key, value in kwargs.items():
        if key in params and params[key].kind is not params[key].VAR_KEYWORD:
            shapes[key] = walk(value)
        else:
            extra[key] = walk(value)
    if extra and var_keyword is not None:
        shapes[var_keyword] = extra
    return shapes


def export_program(module: nn.Module, samples: SampleStore, dynamic_batch: bool = True):
    """torch.export the module on its largest recorded batch (the call bound by name: model.calls), with a
    dynamic batch dimension when the samples hold several batch sizes."""
    sample = max(bound_samples(module, samples), key=lambda s: s.batch_size)
    dynamic = None
    if dynamic_batch and len(samples.batch_sizes()) > 1 and sample.batch_size > 1:
        dynamic = batch_dynamic_shapes(module, sample.args, sample.kwargs, sample.batch_size, torch.export.Dim.AUTO)
    return torch.export.export(module, tuple(sample.args), dict(sample.kwargs), dynamic_shapes=dynamic)


class TorchInductorAotBackend(Backend):
    config_class = TorchInductorAotBackendConfig
    is_jit = False
    build_cost = 4.0    # export, then a whole AOTInductor compile and package (about 60 s for an 8 x 4096 MLP)

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        sample = max(samples, key=lambda s: s.batch_size)
        self._call = BakedCall(self.name, module, CallForm.of(module, sample.args, sample.kwargs)[1])
        program = export_program(module, samples, self.config.dynamic_batch)
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
