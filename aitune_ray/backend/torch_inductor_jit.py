"""TorchInductorJitBackend: torch.compile with the Inductor backend."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.autocast import Autocast, autocast_tolerance_dtype, check_autocast, module_dtype
from aitune_ray.backend.backend import SAFE, Backend, BackendConfig
from aitune_ray.backend.cudagraph_outputs import call_owned, captures_graphs
from aitune_ray.measure.correctness import default_tolerance
from aitune_ray.errors import ConfigError
from aitune_ray.runtime.frames import own_frame
from aitune_ray.model.samples import SampleStore

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

#: Inductor options a checkpoint may set (BackendConfig.safe_fields), each with the type its value must have:
#: switches and sizes of code generation. Left out, among others: cpp.cxx (the compiler run), trace.* and
#: debug_dir (folders written), anything naming a path, a library or a command; those load only from a trusted
#: checkpoint.
_SWITCHES = (
    "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "epilogue_fusion", "epilogue_fusion_first",
    "pattern_matcher", "reorder_for_locality", "aggressive_fusion", "split_reductions", "shape_padding",
    "comprehensive_padding", "pad_outputs", "permute_fusion", "conv_1x1_as_mm", "layout_optimization", "freezing",
    "fallback_random", "implicit_fallbacks", "size_asserts", "nan_asserts", "coordinate_descent_tuning",
    "coordinate_descent_check_all_directions", "force_same_precision", "emulate_precision_casts", "combo_kernels",
    "benchmark_fusion", "dynamic_scale_rblock", "group_fusion", "batch_fusion", "joint_graph_constant_folding",
    "cpp_wrapper", "triton.cudagraphs", "triton.cudagraph_trees", "triton.cudagraph_skip_dynamic_graphs",
    "triton.autotune_pointwise", "triton.autotune_cublasLt", "triton.persistent_reductions",
    "triton.divisible_by_16", "triton.unique_kernel_names", "triton.enable_persistent_tma_matmul",
    "triton.use_block_ptr", "cpp.dynamic_threads", "cpp.enable_tiling_heuristics", "cpp.weight_prepack")
_SIZES = ("max_fusion_size", "realize_opcount_threshold", "unroll_reductions_threshold", "triton.max_tiles",
          "triton.multi_kernel", "cpp.simdlen", "cpp.threads", "cpp.min_chunk_size")
_WORDS = ("max_autotune_gemm_backends", "max_autotune_gemm_search_space")   # "ATEN,TRITON", "DEFAULT"
SAFE_INDUCTOR_OPTIONS = {**{name: bool for name in _SWITCHES}, **{name: int for name in _SIZES},
                         **{name: str for name in _WORDS}}


@dataclasses.dataclass
class TorchInductorJitBackendConfig(BackendConfig):
    """Arguments of torch.compile: mode, fullgraph, dynamic and Inductor options. autocast_enabled /
    autocast_dtype: compile and run under torch.autocast (see backend.autocast)."""

    safe_fields = {"mode": SAFE, "fullgraph": SAFE, "dynamic": SAFE, "options": SAFE_INDUCTOR_OPTIONS,
                   "autocast_enabled": SAFE, "autocast_dtype": SAFE}

    fullgraph: bool = False
    dynamic: bool | None = None
    mode: str | None = None
    options: dict | None = None
    autocast_enabled: bool = False   # run under torch.autocast (AITune's option; outputs keep the module's dtype)
    autocast_dtype: str | None = None   # "float16" or "bfloat16" (or a torch dtype); null: torch.autocast's default

    def __post_init__(self):
        check_autocast(self)
        if self.mode is not None and self.mode not in COMPILE_MODES:
            raise ConfigError(f"mode must be one of {COMPILE_MODES} or None. Invalid mode: {self.mode!r}")
        if self.mode is not None and self.options:
            raise ConfigError("Cannot specify both 'mode' and 'options' parameters in config. torch.compile takes "
                              "either mode or options, not both")


class TorchInductorJitBackend(Backend):
    config_class = TorchInductorJitBackendConfig
    is_jit = True

    def __init__(self, config: TorchInductorJitBackendConfig | None = None):
        super().__init__(config)
        reduced = autocast_tolerance_dtype(self.config)
        if reduced is not None:  # reduced precision: held to that dtype's tolerance
            self.default_tolerance = default_tolerance(reduced)

    def cost_hint(self) -> float:
        # max-autotune benchmarks GEMM templates while it compiles (2 to 3 times a default compile on an H200)
        return 2.5 if (self.config.mode or "").startswith("max-autotune") else 1.0

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        cfg = self.config
        # A frame of its own: variants of one module class must not share (and exhaust) one Dynamo cache.
        self._compiled = torch.compile(own_frame(module, f"jit_{type(module).__name__}"), backend="inductor",
                                       mode=cfg.mode, fullgraph=cfg.fullgraph, dynamic=cfg.dynamic,
                                       options=cfg.options)
        self._autocast = Autocast(cfg, device, module_dtype(module))
        # Compile now, on every recorded sample, so build time is paid here and not at first inference.
        with torch.no_grad():
            for sample in samples:
                self._infer(*sample.args, **sample.kwargs)

    def _uses_cudagraphs(self) -> bool:
        return captures_graphs(self.device, self.config.mode, self.config.options)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if self._uses_cudagraphs():
            return call_owned(self._autocast.call, self._compiled, *args, **kwargs)
        if self.config.autocast_enabled:
            return self._autocast.call(self._compiled, *args, **kwargs)
        return self._compiled(*args, **kwargs)
