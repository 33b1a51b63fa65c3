"""TorchTensorRTAotBackend: torch.export, torch_tensorrt.dynamo.compile, saved with torch_tensorrt.save.

What is exported is backend.flat_call's tensors-only wrapper (the call's tensor leaves in, its non-tensor
arguments constants checked on every call by backend.baked_call). The export and the TensorRT inputs share
one range per dynamic axis, from the recorded shapes (one dynamic profile, tensorrt_profiles):
``torch.export.Dim`` objects for the export (axes of equal sizes in every sample share one, as inputs
sharing a batch must) and ``torch_tensorrt.Input(min_shape, opt_shape, max_shape)`` for the engines. The artifact is torch-tensorrt's ExportedProgram archive
(``model.ep``), loaded with ``torch_tensorrt.load``. Unlike the other artifacts of a checkpoint, that
archive is not pickle-free: ``torch.export.load`` reads its TensorRT engine objects with a full unpickle
once the weights-only load refuses them. The checkpoint loader therefore counts it as code that runs as
it loads (checkpoint/artifact_check): it loads only with ``allow_native_code=True`` or from a signed file.

As a KernelSelector delegate, a plan with SageAttention is refused before anything is built: its
Triton kernels have no TensorRT converter, and an exported program with them inlined cannot be saved
and loaded as one artifact.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import Backend, BackendConfig
from aitune_ray.backend.baked_call import BakedCall
from aitune_ray.backend.flat_call import FlatExport, dynamic_shapes, prepare
from aitune_ray.backend.onnx_export import input_name
from aitune_ray.backend.tensorrt_profiles import ProfileMode, TensorRTProfile, derive_profiles, dynamic_axes
from aitune_ray.backend.torch_tensorrt_config import TorchTensorRTConfig, torch_tensorrt, uses_sage_attention
from aitune_ray.backend.torch_tensorrt_jit import nested_compile_config
from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)

ARTIFACT = "model.ep"


@dataclasses.dataclass
class TorchTensorRTAotBackendConfig(BackendConfig):
    """compile_config: Torch-TensorRT settings (TorchTensorRTConfig).
    pickle_protocol: AITune's, refused: the program is saved in torch.export's format, never pickled."""

    safe_fields = {"compile_config": TorchTensorRTConfig}

    compile_config: TorchTensorRTConfig = dataclasses.field(default_factory=TorchTensorRTConfig)
    pickle_protocol: dataclasses.InitVar[Any] = None   # AITune's; refused below, never stored

    def __post_init__(self, pickle_protocol: Any = None) -> None:
        if pickle_protocol is not None:
            raise ConfigError("TorchTensorRTAotBackendConfig(pickle_protocol=...): the compiled program is saved in "
                              "torch.export's format and a checkpoint never holds a pickle, so there is no protocol "
                              "to choose; leave pickle_protocol out")
        self.compile_config = nested_compile_config(self.compile_config)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "compile_config": self.compile_config.to_dict()}


def export_dynamic_shapes(flat: FlatExport, profile: TensorRTProfile) -> dict | None:
    """torch.export dynamic_shapes of the tensors-only wrapper: one Dim per distinct dynamic range."""
    symbols = dynamic_axes([profile])
    dims: dict[str, Any] = {}

    def spec(name: str) -> dict | None:
        axes = symbols.get(name)
        if not axes:
            return None
        low, _, high = profile.shapes[name]
        out = {}
        for axis, symbol in axes.items():
            if symbol not in dims:
                dims[symbol] = torch.export.Dim(symbol, min=max(low[axis], 1), max=high[axis])
            out[axis] = dims[symbol]
        return out

    return dynamic_shapes([spec(input_name(i)) for i in range(len(flat.leaves))])


def export_program(module: nn.Module, samples: SampleStore) -> tuple[Any, TensorRTProfile, FlatExport]:
    """torch.export of backend.flat_call's tensors-only wrapper of module on its largest recorded call, every
    varying axis dynamic over its recorded range (the calls it serves). Returns (ExportedProgram, the dynamic
    profile, the FlatExport)."""
    flat = prepare(module, samples)
    profile = derive_profiles(flat.served, ProfileMode.SINGLE)[0]
    shapes = export_dynamic_shapes(flat, profile) if not profile.is_static else None
    program = torch.export.export(flat.module, tuple(flat.leaves), dynamic_shapes=shapes, strict=False)
    return program, profile, flat


class TorchTensorRTAotBackend(Backend):
    config_class = TorchTensorRTAotBackendConfig
    libraries = ("torch_tensorrt", "tensorrt")
    is_jit = False
    build_cost = 5.0   # export, TensorRT engine builds, then a save and a load

    def check_kernel_plan(self, plan: KernelOptimizationPlan) -> None:
        if uses_sage_attention(plan):
            raise ConfigError(
                f"{self.name} cannot build a module whose kernel plan uses SageAttention: its Triton kernels "
                "have no TensorRT converter and cannot be saved inside a Torch-TensorRT exported program. Use "
                "TorchTensorRTJitBackend as the delegate (SageAttention then stays in PyTorch), or leave "
                "SageAttentionKernelProvider out of kernel_providers")

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        library = torch_tensorrt(self.name)
        if device.type != "cuda":
            raise BuildError(f"{self.name} builds for a CUDA device, not {device}")
        program, profile, flat = export_program(module.eval(), samples)
        self._call = BakedCall(self.name, module, flat.call, outputs=flat.outputs)

        def trt_input(name: str, tensor: torch.Tensor):
            low, opt, high = profile.shapes[name]
            return library.Input(min_shape=low, opt_shape=opt, max_shape=high, dtype=tensor.dtype, name=name)

        arg_inputs = [trt_input(input_name(i), t) for i, t in enumerate(flat.leaves)]
        settings = self.config.compile_config.settings(library)
        settings["device"] = library.Device(f"cuda:{device.index or 0}")
        compiled = library.dynamo.compile(program, arg_inputs=arg_inputs, **settings)
        self._path = Path(workdir) / ARTIFACT
        # retrace=False: the graph and its symbolic shapes are saved as compiled, not exported again
        library.save(compiled, str(self._path), output_format="exported_program", retrace=False)
        del compiled
        self._open(device)   # run what the checkpoint will hold, not the in-memory module

    def _open(self, device: torch.device) -> None:
        library = torch_tensorrt(self.name)
        self._module = library.load(str(self._path)).module().to(device)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._call.run(args, kwargs, self._module)   # other non-tensor arguments: eager (baked_call)

    def _state(self) -> dict:
        return {"call": self._call.to_data()}

    def _artifacts(self) -> dict[str, Path]:
        return {ARTIFACT: self._path}

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        if ARTIFACT not in artifacts:
            raise ConfigError(f"{self.name} checkpoint lacks its {ARTIFACT} artifact")
        self._path = Path(artifacts[ARTIFACT])
        self._call = BakedCall.from_data(self.name, module, (state or {}).get("call"))
        self._open(device)
