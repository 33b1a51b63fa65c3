"""ONNX Runtime execution providers, the provider options a config may set, and the session options.

Option names are checked when the config is made, against the keys each provider parses (ONNX Runtime
1.31), so that a typo is an error that names the key rather than an option ONNX Runtime ignores or rejects
later on a GPU. The backend sets some keys itself (the device, the compute stream, CUDA graphs, the
TensorRT cache folders); a config that sets those is an error too.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import torch

from aitune_ray.errors import ConfigError


class ONNXExecutionProvider(str, enum.Enum):
    """Values are ONNX Runtime's provider names; AITune's values ("cuda", "tensorrt", and "cpu") name the
    same members: ONNXExecutionProvider("cuda") is CUDA."""

    CPU = "CPUExecutionProvider"
    CUDA = "CUDAExecutionProvider"
    TENSORRT = "TensorrtExecutionProvider"

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str):
            return PROVIDER_ALIASES.get(value.lower())
        return None


#: Short names a config may use for a provider in provider_options.
PROVIDER_ALIASES = {"cpu": ONNXExecutionProvider.CPU, "cuda": ONNXExecutionProvider.CUDA,
                    "tensorrt": ONNXExecutionProvider.TENSORRT}

#: Keys the backend sets from the device, the config and the artifact folder.
OWNED_KEYS = {
    ONNXExecutionProvider.CPU: set(),
    ONNXExecutionProvider.CUDA: {"device_id", "user_compute_stream", "has_user_compute_stream", "enable_cuda_graph"},
    ONNXExecutionProvider.TENSORRT: {"device_id", "user_compute_stream", "has_user_compute_stream",
                                     "trt_cuda_graph_enable", "trt_engine_cache_path", "trt_timing_cache_path"},
}

#: Keys a config may set, per provider.
USER_KEYS = {
    ONNXExecutionProvider.CPU: set(),
    ONNXExecutionProvider.CUDA: {
        "gpu_mem_limit", "arena_extend_strategy", "cudnn_conv_algo_search", "do_copy_in_default_stream",
        "cudnn_conv_use_max_workspace", "cudnn_conv1d_pad_to_nc1d", "tunable_op_enable",
        "tunable_op_tuning_enable", "tunable_op_max_tuning_duration_ms", "enable_skip_layer_norm_strict_mode",
        "prefer_nhwc", "use_ep_level_unified_stream", "use_tf32", "fuse_conv_bias", "sdpa_kernel"},
    ONNXExecutionProvider.TENSORRT: {
        "trt_max_partition_iterations", "trt_min_subgraph_size", "trt_max_workspace_size", "trt_fp16_enable",
        "trt_int8_enable", "trt_int8_calibration_table_name", "trt_int8_use_native_calibration_table",
        "trt_dla_enable", "trt_dla_core", "trt_dump_subgraphs", "trt_engine_cache_enable",
        "trt_engine_cache_prefix", "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable",
        "trt_layer_norm_fp32_fallback", "trt_timing_cache_enable", "trt_force_timing_cache",
        "trt_detailed_build_log", "trt_build_heuristics_enable", "trt_sparsity_enable",
        "trt_builder_optimization_level", "trt_auxiliary_streams", "trt_tactic_sources",
        "trt_extra_plugin_lib_paths", "trt_profile_min_shapes", "trt_profile_max_shapes",
        "trt_profile_opt_shapes", "trt_engine_hw_compatible", "trt_op_types_to_exclude"},
}

#: Keys a checkpoint may set (ONNXRuntimeBackendConfig.safe_fields), per provider: those that name no file,
#: folder or library. trt_extra_plugin_lib_paths loads libraries, trt_int8_calibration_table_name and
#: trt_engine_cache_prefix name files, trt_dump_subgraphs writes files: trusted checkpoints only.
SAFE_PROVIDER_OPTIONS = {provider.value: frozenset(keys - {
    "trt_extra_plugin_lib_paths", "trt_int8_calibration_table_name", "trt_engine_cache_prefix",
    "trt_dump_subgraphs"}) for provider, keys in USER_KEYS.items()}

#: What the backend turns on for the TensorRT EP unless the config says otherwise (caches under the artifacts).
TENSORRT_DEFAULTS = {"trt_engine_cache_enable": True, "trt_timing_cache_enable": True}
TENSORRT_CACHE = "trt_cache"

GRAPH_OPTIMIZATION_LEVELS = ("disable_all", "enable_basic", "enable_extended", "enable_layout", "enable_all")

#: ONNX Runtime's transformer optimizer model types this backend offers (onnxruntime.transformers.optimizer).
TRANSFORMER_MODEL_TYPES = ("bert", "vit", "swin", "clip", "bart", "gpt2", "t5", "unet", "vae", "conformer")


def provider_of(name: Any) -> ONNXExecutionProvider:
    if isinstance(name, str) and name.lower() in PROVIDER_ALIASES:
        return PROVIDER_ALIASES[name.lower()]
    try:
        return ONNXExecutionProvider(name)
    except ValueError:
        raise ConfigError(f"Invalid execution_provider: unknown ONNX Runtime execution provider {name!r}; one of "
                          f"{sorted(PROVIDER_ALIASES)} or {[p.value for p in ONNXExecutionProvider]}") from None


def normalize_provider_options(options: dict | None) -> dict[str, dict[str, Any]]:
    """{provider (name or alias): {key: plain value}} -> {provider name: {key: value}}, every key checked."""
    normalized: dict[str, dict[str, Any]] = {}
    for name, values in (options or {}).items():
        provider = provider_of(name)
        if not isinstance(values, dict):
            raise ConfigError(f"provider_options[{name!r}] must be a mapping of option names to values")
        for key, value in values.items():
            if key in OWNED_KEYS[provider]:
                raise ConfigError(f"{provider.value} option {key!r} is set by ONNXRuntimeBackend "
                                  "(from the device, use_cuda_graphs and the artifact folder); leave it out")
            if key not in USER_KEYS[provider]:
                raise ConfigError(f"unknown {provider.value} option {key!r}; known: "
                                  f"{sorted(USER_KEYS[provider]) or 'none'}")
            if not isinstance(value, (bool, int, float, str)):
                raise ConfigError(f"{provider.value} option {key!r} must be a bool, number or string, "
                                  f"not {type(value).__name__}")
        normalized.setdefault(provider.value, {}).update(values)
    return normalized


def check_graph_optimization_level(level: str | None) -> str | None:
    if level is not None and level not in GRAPH_OPTIMIZATION_LEVELS:
        raise ConfigError(f"unknown graph_optimization_level {level!r}; one of {list(GRAPH_OPTIMIZATION_LEVELS)}")
    return level


def check_transformer_optimizer(model_type: str | None) -> str | None:
    if model_type is not None and model_type not in TRANSFORMER_MODEL_TYPES:
        raise ConfigError(f"unknown transformer_optimizer model type {model_type!r}; one of "
                          f"{list(TRANSFORMER_MODEL_TYPES)} (or None for none)")
    return model_type


def _ort_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def session_providers(provider: ONNXExecutionProvider, options: dict[str, dict[str, Any]], device_index: int,
                      stream: int | None, cuda_graphs: bool, artifact_dir: Path,
                      tf32: bool = False) -> tuple[list[str], list[dict]]:
    """The providers list and one options dict per provider (ONNX Runtime needs one per entry).

    tf32: the CUDA EP's use_tf32 unless the options set it (ONNX Runtime's default is on; the backend
    passes torch's matmul setting, so that fp32 matches eager as closely as torch itself computes it)."""
    chain = [provider]
    if provider == ONNXExecutionProvider.TENSORRT:
        chain.append(ONNXExecutionProvider.CUDA)   # what TensorRT cannot take runs on CUDA, never the CPU
    entries = []
    for ep in chain:
        values: dict[str, Any] = {}
        if ep != ONNXExecutionProvider.CPU:
            values["device_id"] = device_index
            if stream is not None:
                values.update(user_compute_stream=stream, has_user_compute_stream=True)
        if ep == ONNXExecutionProvider.CUDA:
            values["use_tf32"] = tf32
            if cuda_graphs and provider == ONNXExecutionProvider.CUDA:
                values["enable_cuda_graph"] = True
        if ep == ONNXExecutionProvider.TENSORRT:
            cache = artifact_dir / TENSORRT_CACHE
            cache.mkdir(parents=True, exist_ok=True)
            values.update(TENSORRT_DEFAULTS, trt_engine_cache_path=str(cache), trt_timing_cache_path=str(cache))
            if cuda_graphs:
                values["trt_cuda_graph_enable"] = True
        values.update(options.get(ep.value, {}))
        entries.append({k: _ort_value(v) for k, v in values.items()})
    return [ep.value for ep in chain], entries


def session_options(ort, level: str | None, allow_spinning: bool = False):
    """The session's options. Its intra-op threads are torch's (torch.get_num_threads(): the threading settings
    of the calls it is compared with and served beside). Unless allow_spinning, they sleep when a call
    returns: ONNX Runtime's default leaves them spinning for tens of milliseconds, and on the CPU whatever the
    process runs next in that time (eager, another module, the next candidate in a timing round) runs up to
    2x slower (docs/measurement.md)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, torch.get_num_threads())
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    if level is not None:
        value = getattr(ort.GraphOptimizationLevel, "ORT_" + level.upper(), None)
        if value is None:
            raise ConfigError(f"this ONNX Runtime ({ort.__version__}) has no graph optimization level {level!r}")
        options.graph_optimization_level = value
    return options
