"""TensorRTBackend: ONNX export, optional ModelOpt autocast, a TensorRT engine, run on the caller's stream.

Build steps (each is a file in the build folder):

1. ONNX export of the module on its largest recorded sample (``onnx/model.onnx``), with every axis that
   the optimization profiles let vary exported as dynamic;
2. with ``quantization_config=ONNXAutoCastConfig(...)``: ModelOpt autocast to fp16/bf16
   (``onnx/model_autocast.onnx``), on the recorded samples as reference inputs;
3. the optimization profiles (``tensorrt/profiles.json``), from the recorded shapes (tensorrt_profiles);
4. the engine (``tensorrt/model.plan``): strongly typed network, workspace, optimization level, TF32,
   timing cache (tensorrt_engine).

A checkpoint stores ``model.plan`` and ``profiles.json`` as artifacts and the output structure in the
manifest: nothing pickled. A plan holds compiled GPU kernels, so the loader treats it as native code
(``allow_native_code=True`` or a signed checkpoint). Loading deserializes the plan on the target GPU; a plan runs only with the
TensorRT version and GPU family it was built for (``compatibility_level`` widens the GPU side).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig, require
from aitune_ray.backend.onnx_autocast import ONNXAutoCastConfig, autocast_onnx
from aitune_ray.backend.baked_call import OffGraph
from aitune_ray.backend.onnx_export import ExportedModel, export_onnx, flat_inputs
from aitune_ray.model.calls import bound_samples
from aitune_ray.backend.tensorrt_engine import BuildSettings, EngineRunner, build_engine, tensorrt
from aitune_ray.backend.tensorrt_profiles import (ProfileMode, TensorRTProfile, derive_profiles, dynamic_axes,
                                                  load_profiles, save_profiles)
from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)

STATE_VERSION = 1
PLAN = "model.plan"
PROFILES = "profiles.json"
COMPATIBILITY_LEVELS = ("ampere_plus", "same_compute_capability")
QUANTIZATION_TYPES = {"ONNXAutoCastConfig": ONNXAutoCastConfig}


@dataclasses.dataclass
class TensorRTBackendConfig(BackendConfig):
    """use_dynamo / opset_version: the ONNX export (torch.export-based exporter or the TorchScript tracer).
    workspace_size: bytes of builder workspace (None: TensorRT's default, the GPU's memory).
    optimization_level: TensorRT builder optimization level 0-5 (None: TensorRT's default, 3).
    compatibility_level: None, "ampere_plus" or "same_compute_capability" (engines for other GPUs).
    timing_cache: a file loaded before each build and merged after it; give a path on a shared folder so
        builds on several actors share it (None: a cache in the build folder, kept with the build).
    profiles: ProfileMode.SINGLE (one dynamic profile), ProfileMode.SAMPLES_USED (one static profile per
        recorded input-shape set), or a list of TensorRTProfile.
    quantization_config: None, or ONNXAutoCastConfig for fp16/bf16 by ModelOpt autocast.
    enable_tf32: TF32 for fp32 matrix math.
    use_cuda_graphs / max_cuda_graphs: one CUDA graph per static profile (at most max_cuda_graphs).
    cuda_graph_cache_policy: AITune's "lfu" or "lru", checked and kept; the graphs here are captured once
        per static profile at build and never evicted, so no policy changes which are used.
    device: AITune's engine device, "cuda" or "cuda:N"; it must agree with the device tune() builds on."""

    # timing_cache is left out: a file read and written, chosen by a trusted checkpoint only
    safe_fields = {"quantization_config": ONNXAutoCastConfig, **{name: SAFE for name in (
        "use_dynamo", "workspace_size", "opset_version", "optimization_level", "compatibility_level", "profiles",
        "enable_tf32", "use_cuda_graphs", "max_cuda_graphs")}}

    use_dynamo: bool = True
    workspace_size: int | None = None
    opset_version: int | None = None
    optimization_level: int | None = None
    compatibility_level: str | None = None
    timing_cache: str | None = None
    profiles: Any = ProfileMode.SINGLE
    device: str = "cuda"
    quantization_config: ONNXAutoCastConfig | None = None
    enable_tf32: bool = True
    use_cuda_graphs: bool = True
    max_cuda_graphs: int = 8
    cuda_graph_cache_policy: str = "lfu"

    def __post_init__(self) -> None:
        if self.cuda_graph_cache_policy not in ("lfu", "lru"):
            raise ConfigError(f"TensorRTBackendConfig.cuda_graph_cache_policy must be 'lfu' or 'lru', "
                              f"not {self.cuda_graph_cache_policy!r}")
        try:
            if torch.device(self.device).type != "cuda":
                raise ValueError
        except (RuntimeError, ValueError, TypeError):
            raise ConfigError(f"TensorRTBackendConfig.device must be 'cuda' or 'cuda:N', not {self.device!r}") from None
        self.device = str(self.device)
        if isinstance(self.profiles, (list, tuple)):
            self.profiles = [p if isinstance(p, TensorRTProfile) else TensorRTProfile.from_dict(p)
                             for p in self.profiles]
            if not self.profiles:
                raise ConfigError("TensorRTBackendConfig.profiles: an empty list gives the engine no profile")
        else:
            try:
                self.profiles = ProfileMode(self.profiles)
            except ValueError:
                raise ConfigError(f"TensorRTBackendConfig.profiles must be one of "
                                  f"{[m.value for m in ProfileMode]} or a list of profiles, "
                                  f"not {self.profiles!r}") from None
        if isinstance(self.quantization_config, dict):
            data = dict(self.quantization_config)
            kind = data.pop("_type", "ONNXAutoCastConfig")
            if kind not in QUANTIZATION_TYPES:
                raise ConfigError(f"quantization_config type {kind!r} is not one of {sorted(QUANTIZATION_TYPES)}")
            self.quantization_config = QUANTIZATION_TYPES[kind].from_dict(data)
        if self.quantization_config is not None and not isinstance(self.quantization_config, ONNXAutoCastConfig):
            raise ConfigError("TensorRTBackendConfig.quantization_config takes an ONNXAutoCastConfig or None, "
                              f"not {type(self.quantization_config).__name__}")
        for name in ("workspace_size", "opset_version", "optimization_level"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"TensorRTBackendConfig.{name} must be a non-negative integer or None")
        if self.optimization_level is not None and self.optimization_level > 5:
            raise ConfigError("TensorRTBackendConfig.optimization_level must be between 0 and 5")
        if self.compatibility_level is not None and self.compatibility_level not in COMPATIBILITY_LEVELS:
            raise ConfigError(f"TensorRTBackendConfig.compatibility_level must be one of {COMPATIBILITY_LEVELS} "
                              f"or None, not {self.compatibility_level!r}")
        if isinstance(self.max_cuda_graphs, bool) or not isinstance(self.max_cuda_graphs, int) \
                or self.max_cuda_graphs < 1:
            raise ConfigError("TensorRTBackendConfig.max_cuda_graphs must be a positive integer")
        if self.timing_cache is not None:
            self.timing_cache = str(self.timing_cache)

    def to_dict(self) -> dict:
        data = super().to_dict()
        data["profiles"] = ([p.to_dict() for p in self.profiles] if isinstance(self.profiles, list)
                            else self.profiles.value)
        if self.quantization_config is not None:
            data["quantization_config"] = {"_type": type(self.quantization_config).__name__,
                                           **self.quantization_config.to_dict()}
        return data


class TensorRTBackend(Backend):
    config_class = TensorRTBackendConfig
    libraries = ("tensorrt", "nvidia-modelopt")
    is_jit = False
    build_cost = 6.0   # export, then an engine build that tries many tactics (minutes on a large model)

    def cost_hint(self) -> float:
        level = self.config.optimization_level
        return self.build_cost * (1.5 if level is not None and level >= 4 else 1.0)

    # ----- build -------------------------------------------------------------------------------
    def prepare(self, module: nn.Module, samples: SampleStore, workdir: Path) -> tuple[Path, list[TensorRTProfile]]:
        """The steps before the engine build (no TensorRT needed): the ONNX model TensorRT will parse, and
        the optimization profiles, both written under workdir. Returns (ONNX path, profiles)."""
        workdir = Path(workdir)
        samples = bound_samples(module, samples)   # inputs named as the export names them: calls bound by name
        profiles = derive_profiles(samples, self.config.profiles)
        self._exported = export_onnx(module, samples, workdir / "onnx" / "model.onnx",
                                     use_dynamo=self.config.use_dynamo, opset_version=self.config.opset_version,
                                     input_axes=dynamic_axes(profiles))
        self._off_graph = OffGraph(self.name, module, self._exported.call)
        onnx_path = self._exported.path
        if self.config.quantization_config is not None:
            on_cuda = any(t.is_cuda for s in samples for t in flat_inputs(s.args, s.kwargs).values())
            providers = ("cuda",) if on_cuda and _ort_has_cuda() else ("cpu",)
            onnx_path = autocast_onnx(onnx_path, workdir / "onnx" / "model_autocast.onnx",
                                      self.config.quantization_config, samples, providers)
        (workdir / "tensorrt").mkdir(parents=True, exist_ok=True)
        self._profiles_path = save_profiles(profiles, workdir / "tensorrt" / PROFILES)
        self._profiles = profiles
        return onnx_path, profiles

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        self._require(device)   # before the export: a missing library is said at once, naming the extra
        wanted = torch.device(self.config.device)
        if device.type == "cuda" and wanted.index is not None and wanted.index != device.index:
            raise BuildError(f"{self.name} is configured for device {self.config.device!r} but tune() builds it on "
                             f"{device}: tune with device={self.config.device!r}, or leave the config's device out")
        onnx_path, profiles = self.prepare(module, samples, workdir)
        cache = Path(self.config.timing_cache) if self.config.timing_cache else Path(workdir) / "timing.cache"
        settings = BuildSettings(self.config.workspace_size, self.config.optimization_level,
                                 self.config.compatibility_level, self.config.enable_tf32, cache)
        self._plan_path = self._build_engine(onnx_path, Path(workdir) / "tensorrt" / PLAN, profiles, settings,
                                             device)
        self._open(device)

    # The three steps that need TensorRT itself.
    def _require(self, device: torch.device) -> None:
        tensorrt(self.name)
        if device.type != "cuda":
            raise BuildError(f"{self.name} runs on a CUDA device, not {device}")

    def _build_engine(self, onnx_path: Path, plan_path: Path, profiles: list[TensorRTProfile],
                      settings: BuildSettings, device: torch.device) -> Path:
        with torch.cuda.device(device):
            return build_engine(onnx_path, plan_path, profiles, settings)

    def _runner(self, plan: bytes, device: torch.device) -> Any:
        """An object with input_names and run({name: tensor}) -> {name: tensor}."""
        return EngineRunner(plan, self._profiles, device, self.config.use_cuda_graphs, self.config.max_cuda_graphs)

    def _open(self, device: torch.device) -> None:
        self._engine = self._runner(self._plan_path.read_bytes(), device)
        missing = [n for n in self._exported.graph_inputs if n not in self._engine.input_names]
        if missing:
            raise BuildError(f"the engine lacks ONNX inputs {missing}")

    # ----- inference ---------------------------------------------------------------------------
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        by_name = self._exported.call_inputs(args, kwargs)
        if by_name is None:   # other non-tensor arguments than the engine holds: this call runs eagerly
            return self._off_graph(args, kwargs)
        outputs = self._engine.run({n: by_name[n] for n in self._engine.input_names})
        return self._exported.unflatten([outputs[n] for n in self._exported.output_names])

    def _deactivate(self) -> None:
        pass   # the engine stays loaded; switching back costs nothing

    # ----- checkpoint --------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"version": STATE_VERSION, "onnx": self._exported.to_dict()}

    def _artifacts(self) -> dict[str, Path]:
        return {PLAN: self._plan_path, PROFILES: self._profiles_path}

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        if int(state.get("version", STATE_VERSION)) > STATE_VERSION:
            raise ConfigError(f"{self.name} state version {state['version']} is newer than this aitune-ray")
        for name in (PLAN, PROFILES):
            if name not in artifacts:
                raise ConfigError(f"{self.name} checkpoint lacks its {name} artifact")
        self._require(device)
        self._plan_path, self._profiles_path = Path(artifacts[PLAN]), Path(artifacts[PROFILES])
        self._profiles = load_profiles(self._profiles_path)
        self._exported = ExportedModel.from_dict(state["onnx"], self._plan_path, module)
        self._off_graph = OffGraph(self.name, module, self._exported.call)
        self._open(device)


def _ort_has_cuda() -> bool:
    ort = require("onnxruntime", "onnx-gpu", "ONNX autocast on a GPU")
    return "CUDAExecutionProvider" in ort.get_available_providers()
