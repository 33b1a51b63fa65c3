"""TorchTensorRTConfig: Torch-TensorRT compilation settings as plain data, shared by its JIT and AOT backends.

The fields carry the names of ``torch_tensorrt.dynamo.CompilationSettings``; ``options`` passes any
other setting through. At build, ``settings()`` turns them into keyword arguments for the installed
torch-tensorrt, and says so when one of them is a setting that version no longer has.

Precisions follow torch-tensorrt's explicit-typing rule (2.11 and 2.12): with ``use_explicit_typing=True``
(the default) TensorRT keeps the model's own dtypes and ``enabled_precisions`` must stay ``{float32}``;
fp16 kernels then come from an fp16 model, or from ``use_explicit_typing=False`` with
``enabled_precisions=["float16", ...]`` (weak typing, deprecated). torch-tensorrt 2.13 (TensorRT 11) has
neither setting: the model's dtypes, or ``options={"enable_autocast": True, ...}``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch

from aitune_ray.backend.backend import SAFE, BackendConfig, require
from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.kernel_forge.kernel_provider import SageAttentionKernelProvider
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan

logger = logging.getLogger(__name__)

EXTRA = "torch-tensorrt"
PRECISIONS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
              "int8": torch.int8, "float8_e4m3fn": torch.float8_e4m3fn}


#: CompilationSettings a checkpoint may set in options (TorchTensorRTConfig.safe_fields): switches and sizes.
#: Left out, among others: engine_cache_dir, timing_cache_path, custom_engine_cache, cache_built_engines,
#: reuse_cached_engines (files and folders), dryrun (may name a file), and anything this list does not know.
SAFE_OPTIONS = frozenset({
    "enable_autocast", "autocast_low_precision_type", "autocast_excluded_nodes", "autocast_excluded_ops",
    "autocast_max_output_threshold", "autocast_max_depth_of_reduction", "use_python_runtime", "use_fast_partitioner",
    "enable_experimental_decompositions", "sparse_weights", "num_avg_timing_iters", "max_aux_streams",
    "version_compatible", "hardware_compatible", "assume_dynamic_shape_support", "immutable_weights",
    "refit_identical_engine_weights", "strip_engine_weights", "enable_weight_streaming", "tiling_optimization_level",
    "l2_limit_for_tiling", "offload_module_to_cpu", "pass_through_build_failures", "engine_capability",
    "allow_shape_tensors", "use_distributed_mode_trace", "enable_resource_partitioning", "cpu_memory_budget"})


def torch_tensorrt(what: str) -> Any:
    """Import torch_tensorrt, or raise MissingDependencyError naming the torch-tensorrt extra."""
    return require("torch_tensorrt", EXTRA, what)


def _precision(value: Any) -> str:
    if isinstance(value, torch.dtype):
        value = str(value).replace("torch.", "")
    name = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
            "float": "float32", "fp8": "float8_e4m3fn"}.get(str(value), str(value))
    if name not in PRECISIONS:
        raise ConfigError(f"enabled_precisions: {value!r} is not one of {sorted(PRECISIONS)}")
    return name


@dataclasses.dataclass
class TorchTensorRTConfig(BackendConfig):
    """enabled_precisions: dtypes TensorRT may choose kernels in (names or torch dtypes).
    use_explicit_typing: keep the model's dtypes (strong typing); see the module docstring. None (the default):
        True, or False where enabled_precisions names more than float32, so that AITune's
        TorchTensorRTConfig(enabled_precisions={torch.float16}) asks for fp16 kernels as written (weak typing).
    workspace_size: builder workspace bytes (0: TensorRT's default).
    min_block_size: fewest convertible ops for a TensorRT partition (smaller runs stay in PyTorch).
    torch_executed_ops: ops kept in PyTorch ("torch.ops.aten.gelu.default", ...).
    optimization_level: TensorRT builder optimization level 0-5 (None: its default).
    timing_cache_path: a shared file lets builds on several actors share TensorRT timings.
    options: further CompilationSettings fields, passed as given (plain values)."""

    # timing_cache_path is left out: a file read and written, chosen by a trusted checkpoint only
    safe_fields = {"options": SAFE_OPTIONS, **{name: SAFE for name in (
        "enabled_precisions", "use_explicit_typing", "workspace_size", "min_block_size", "torch_executed_ops",
        "optimization_level", "truncate_double", "require_full_compilation", "disable_tf32")}}

    enabled_precisions: list = dataclasses.field(default_factory=lambda: ["float32"])
    use_explicit_typing: bool | None = None
    workspace_size: int = 0
    min_block_size: int = 5
    torch_executed_ops: list = dataclasses.field(default_factory=list)
    optimization_level: int | None = None
    truncate_double: bool = False
    require_full_compilation: bool = False
    disable_tf32: bool = False
    timing_cache_path: str | None = None
    options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        precisions = self.enabled_precisions
        if isinstance(precisions, (str, torch.dtype)):
            precisions = [precisions]
        self.enabled_precisions = sorted({_precision(p) for p in precisions})
        if not self.enabled_precisions:
            raise ConfigError("enabled_precisions must name at least one precision")
        if self.use_explicit_typing is None:
            self.use_explicit_typing = self.enabled_precisions == ["float32"]
            if not self.use_explicit_typing:
                logger.info("TorchTensorRTConfig: enabled_precisions %s, so use_explicit_typing=False (weak typing, "
                            "deprecated in torch-tensorrt 2.11 and gone in 2.13)", self.enabled_precisions)
        if self.use_explicit_typing and self.enabled_precisions != ["float32"]:
            raise ConfigError(
                f"enabled_precisions {self.enabled_precisions} with use_explicit_typing=True: torch-tensorrt keeps "
                "the model's own dtypes under explicit typing and accepts only float32 there. Cast the model "
                "(e.g. to float16) and keep enabled_precisions=['float32'], or set use_explicit_typing=False "
                "(weak typing, deprecated in torch-tensorrt 2.11 and gone in 2.13)")
        if isinstance(self.min_block_size, bool) or not isinstance(self.min_block_size, int) or self.min_block_size < 1:
            raise ConfigError("min_block_size must be a positive integer")
        if isinstance(self.workspace_size, bool) or not isinstance(self.workspace_size, int) or self.workspace_size < 0:
            raise ConfigError("workspace_size must be a non-negative integer")
        if self.optimization_level is not None and not (isinstance(self.optimization_level, int)
                                                        and 0 <= self.optimization_level <= 5):
            raise ConfigError("optimization_level must be between 0 and 5, or None")
        self.torch_executed_ops = sorted(str(op) for op in self.torch_executed_ops)
        if not isinstance(self.options, dict):
            raise ConfigError("options must be a dict of further CompilationSettings fields")
        clash = sorted(set(self.options) & {f.name for f in dataclasses.fields(self)})
        if clash:
            raise ConfigError(f"options repeats the fields {clash}; set them directly")

    def settings(self, library: Any, min_block_size: int | None = None) -> dict:
        """Keyword arguments for the installed torch_tensorrt (compile or torch.compile options)."""
        known = {f.name for f in dataclasses.fields(library.dynamo.CompilationSettings)}
        wanted: dict[str, Any] = {
            "enabled_precisions": {PRECISIONS[p] for p in self.enabled_precisions},
            "use_explicit_typing": self.use_explicit_typing,
            "workspace_size": self.workspace_size,
            "min_block_size": self.min_block_size if min_block_size is None else min_block_size,
            "torch_executed_ops": set(self.torch_executed_ops),
            "optimization_level": self.optimization_level,
            "truncate_double": self.truncate_double,
            "require_full_compilation": self.require_full_compilation,
            "disable_tf32": self.disable_tf32,
            **self.options,
        }
        if self.timing_cache_path:
            wanted["timing_cache_path"] = self.timing_cache_path
        defaults = TorchTensorRTConfig()
        unknown = []
        for name in [n for n in wanted if n not in known]:
            value = wanted.pop(name)
            is_default = name in ("enabled_precisions", "use_explicit_typing") and \
                getattr(defaults, name) == getattr(self, name)
            if not is_default:
                unknown.append(name)
        if unknown:
            version = getattr(library, "__version__", "?")
            raise BuildError(f"torch-tensorrt {version} has no setting {', '.join(sorted(unknown))}"
                             + (" (weak typing is gone: use a model of the wanted dtype, or options="
                                "{'enable_autocast': True, 'autocast_low_precision_type': torch.float16})"
                                if "enabled_precisions" in unknown or "use_explicit_typing" in unknown else ""))
        return wanted


def uses_sage_attention(plan: KernelOptimizationPlan) -> bool:
    return any(isinstance(p, SageAttentionKernelProvider) for p in plan.providers)
