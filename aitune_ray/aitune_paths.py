"""AITune 0.6.0's module paths under aitune_ray: `aitune.torch.X.Y` imports as `aitune_ray.X.Y`.

Where this package has a module at that path, it is the module. Every other path is made here, from the
table below, by an import hook placed after the ordinary finders (so a real module always wins): the module
holds the objects of this package that stand for AITune's names, and a name of AITune's module with no
counterpart here fails on use, saying why (`ABSENT`; docs/aitune.md lists the same, generated from it).
tests/aitune/test_module_paths.py checks every one of AITune's 132 paths and names against a list read
from AITune's wheel.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

from aitune_ray.errors import AbsentNameError

ROOT = "aitune_ray"

# ----- why a name is absent ----------------------------------------------------------------------------------
NO_MODES = "a backend is built once per candidate: there are no build or execution modes to choose"
NO_STEPS = ("a backend's build is its _build(module, samples, device, workdir) hook, not a list of build steps; "
            "subclass Backend and override _build and _infer")
NO_DUMMY = "AITune's stand-in for its own tests; subclass Backend or TuneStrategy for one"
TRT_INSIDE = ("TensorRT's builder, runtime, engine info, output allocator, loggers and CUDA graph cache live "
              "inside TensorRTBackend here; configure them through TensorRTBackendConfig")
NO_MODELOPT = ("ModelOpt INT8/FP8 quantization for TensorRT is not wired here; ONNXAutoCastConfig (fp16/bf16) "
               "is, and TorchAOBackend quantizes")
TORCH_TRT_INSIDE = ("Torch-TensorRT is imported and its logging set inside the Torch-TensorRT backends; a missing "
                    "library is that candidate's failed build (MissingDependencyError)")
TORCHAO_NAMES = ("quantization presets are the strings of TorchAOBackendConfig(quantization=...): int8wo, int8dq, "
                 "fp8wo (the default), fp8dq, mxfp8dq, nvfp4dq")
ONE_FILE = ("a checkpoint is one verified .ait file (no pickles, no folders of artifacts): "
            "aitune_ray.save / aitune_ray.load, placed by LocalTorchStorage")
NO_CONFIG = ("there is no global configuration: options are arguments of the strategies, the backend configs, "
             "tune() and the executor")
NO_DISTRIBUTED = ("no multi-rank (torch.distributed) coordination: tuning runs once, its builds spread over Ray "
                  "actors")
LOGGING = "logging is configured by the application; this package logs to the logger named by each module"
INSPECT_INSIDE = "inspect() times modules with aitune_ray.inspecting.finder.ModuleFinder; call inspect()"
KERNEL_PLAN_DICT = "a plan's dict form is this project's (every candidate's record): use to_dict / from_dict"
NO_DIFFUSERS = "no diffusers attention integration: kernel providers replace torch.nn.functional calls"
PROFILER_INSIDE = ("the profiler's helpers are internal to ModuleFunctionKernelProfiler "
                   "(aitune_ray.kernel_forge.profiler)")
NO_LIBS = ("AITune's wrappers of CUDA, ONNX export and torch.export: each backend here exports and loads "
           "what it needs itself")
ONE_MODULE = ("one Module class whose state (ModuleState: RECORDING, TUNED, EAGER) says what it does, recording "
              "calls as aitune_ray.model.samples.Sample")
NO_REGISTRY = "no global module registry: tune(), save() and profile() find the Module wrappers on the object given"
REGION_LABELS = "profile()'s region labels are aitune_ray.performance.regions.LABELS; its data keys are AITune's"
ONE_PROCEDURE = ("timing, correctness and the choice are one procedure here (aitune_ray.measure, "
                 "aitune_ray.decision): screen, confirm, accept; read the results from the TuningReport")
REPORT = "tune() returns a TuningReport (report.markdown(), report.to_dict())"
NO_MIXINS = ("strategies here are composed, not mixed in: enable_find_max_batch_size() and "
             "enable_performance_validation() are methods of every strategy")
JIT_INSPECT = ("INSPECT mode's report (the module hierarchy with each module's calls, state and time) is written by "
               "aitune_ray.jit.inspection.save_report; a module with a graph break (torch._dynamo.explain) stays "
               "eager and its children are tried, with no exception raised")
NO_HELPERS = "AITune's internal helpers (devices, memory, paths, shapes, graph breaks) have no public counterpart"


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: AITune paths below aitune.torch with no module here that give none of AITune's names (each of those is
#: in ABSENT, or the module has none), by the package above them ("" for aitune.torch itself).
_EMPTY_ALIASES: dict[str, str] = {
    "": "distributed integrations libs module_registry task tune_data utils",
    "backend": "torch_tensorrt_logging",
    "backend.tensorrt": "cuda_graphs modelopt_calibration onnx_quantization tensorrt_builder tensorrt_engine_info "
                        "tensorrt_runtime torch_output_allocator torch_quantization",
    "checkpoint": "artifact checkpoint storage_tasks torch_checkpoint",
    "inspecting": "module_inspector",
    "integrations": "diffusers transformers",
    "jit": "html_generator",
    "kernel_forge.kernel_provider": "diffusers_attention_provider",
    "libs": "cuda onnx torch torch_compile",
    "libs.cuda": "cudart memory",
    "libs.onnx": "onnx_exporter onnx_model_info",
    "libs.torch": "torch_exporter",
    "module": "exact_sample_metadata forward_signature graph_spec locator passthrough_module recording_module "
              "sample_metadata tensor_spec tuned_module",
    "performance": "attribution_hooks context runtime_profile utils",
    "task": "correctness find_max_batch_size profiling",
    "task.profiling": "config events measuring_stop_strategy measuring_strategy metrics profiling "
                      "profiling_stop_strategy",
    "tune_data": "report_models",
    "tune_strategy": "formatting mixin multi_backend_strategy profiling_tune_strategy",
    "tune_strategy.mixin": "find_max_batch_size_mixin performance_validation_mixin",
    "utils": "cuda_utils device graph_break_detector memory module path_utils shapes tensor",
}

#: The alias paths that give names: this package's module below aitune_ray -> {AITune path below aitune.torch:
#: the names of that module it gives}.
_ALIASES_BY_SOURCE: dict[str, dict[str, str]] = {
    "api.absent": {
        "config": "aitune_cache_dir config",
        "tune_data.reporting": "snapshot_tuning_data",
    },
    "api.module": {
        "module": "Module",
        "module.wrapper_module": "Module ModuleState",
    },
    "api.tuning": {"tuning": "tune"},
    "backend": {
        "backend.onnx_runtime_backend": "ONNXExecutionProvider ONNXRuntimeBackend ONNXRuntimeBackendConfig",
        "backend.tensorrt": "ONNXAutoCastConfig ProfileMode TensorRTBackend TensorRTBackendConfig TensorRTProfile",
        "backend.tensorrt.onnx_autocast": "ONNXAutoCastConfig",
        "backend.tensorrt.tensorrt_backend": "ProfileMode TensorRTBackend TensorRTBackendConfig",
        "backend.tensorrt.tensorrt_profile": "TensorRTProfile",
        "backend.torch_inductor_aot_backend": "TorchInductorAotBackend TorchInductorAotBackendConfig",
        "backend.torch_inductor_jit_backend": "TorchInductorJitBackend TorchInductorJitBackendConfig",
        "backend.torch_tensorrt_aot_backend": "TorchTensorRTAotBackend TorchTensorRTAotBackendConfig",
        "backend.torch_tensorrt_jit_backend": "TorchTensorRTJitBackend TorchTensorRTJitBackendConfig",
    },
    "checkpoint": {"tuning": "load save"},
    "checkpoint.storage": {"checkpoint.local_torch_storage": "LocalTorchStorage"},
    "jit.patched": {
        "jit.inspect_module": "ModuleState",
        "jit.patched_module": "ModuleState PatchedModule",
    },
    "kernel_forge.kernel_provider.flash_attention4": {
        "kernel_forge.kernel_provider.flash_attention4_provider": "FlashAttention4KernelProvider",
    },
    "kernel_forge.kernel_provider.sage_attention": {
        "kernel_forge.kernel_provider.sage_attention_provider": "SageAttentionKernelProvider",
    },
    "kernel_forge.kernel_provider.torch_sdpa": {
        "kernel_forge.kernel_provider.torch_sdpa_provider": "TorchSDPAKernelProvider",
    },
    "model.dataloader": {
        "dataloader": "DataLoaderFactory default_data_collator ensure_enough_samples samples_generator",
    },
    "model.datasets": {
        "dataloader": "DatasetLike DynamicShapeDataset InputConfig MinMaxRandomDataset SingleBatchDatasetWrapper",
    },
    "model.dynamic_shapes": {"dynamic_shapes": "BatchDim DynamicDim"},
    "model.samples": {"module.sample_store": "Sample SampleStore"},
    "performance.profiling": {"performance.profile": "PerformanceProfile SCHEMA_VERSION profile"},
    "tune_strategy.validation_mode": {"tune_strategy.performance_validation": "PerformanceValidationMode"},
}


def _by_path(by_key: dict[str, dict[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """{key: {path: names}} -> {path: [(key, names), ...]}, the keys in by_key's order, the paths sorted."""
    rows: dict[str, list[tuple[str, str]]] = {}
    for key, paths in by_key.items():
        for path, names in paths.items():
            rows.setdefault(path, []).append((key, names))
    return dict(sorted(rows.items()))


#: AITune path below aitune.torch -> {this package's module below aitune_ray: the names it gives}. Only paths
#: with no module of their own here; a module of this package at an AITune path is imported as it is.
ALIASES: dict[str, dict[str, str]] = dict(sorted({
    **{f"{parent}.{child}".lstrip("."): {} for parent, children in _EMPTY_ALIASES.items()
       for child in _names(children)},
    **{path: dict(sources) for path, sources in _by_path(_ALIASES_BY_SOURCE).items()}}.items()))

#: Why -> {AITune path below aitune.torch ("" for aitune.torch itself): its names with no counterpart here}.
_ABSENT_BY_REASON: dict[str, dict[str, str]] = {
    ONE_FILE: {
        "backend": "ArtifactPath",
        "checkpoint.artifact": "ArtifactPath",
        "checkpoint.checkpoint": "Checkpoint",
        "checkpoint.storage": "Storage",
        "checkpoint.storage_tasks": "AIT_EXTENSION CopyBackendArtifactsTask LoadTask MakeFolderTask "
                                    "RelocateBackendArtifactsTask RemoveFolderTask STATE_DICT_FILE SaveTask "
                                    "ShaSumsLoadTask ShaSumsSaveTask TorchLoadTask TorchSaveTask UnzipLoadTask "
                                    "ZipSaveTask calculate_file_sha_hash check_checkpoint_valid get_sha_sums_path "
                                    "torch_load_with_custom_types",
        "checkpoint.torch_checkpoint": "TorchCheckpoint",
    },
    NO_MODES: {
        "backend": "BuildMode ExecutionMode",
        "backend.backend": "BuildMode ExecutionMode",
    },
    NO_MODELOPT: {
        "backend": "ONNXQuantizationConfig TorchQuantizationConfig",
        "backend.tensorrt": "ONNXQuantizationConfig TorchQuantizationConfig",
        "backend.tensorrt.modelopt_calibration": "prepare_calibration_data",
        "backend.tensorrt.onnx_quantization": "CalibrationMethod ONNXQuantizationConfig ONNXQuantizer "
                                              "QuantizationPrecision",
        "backend.tensorrt.torch_quantization": "HAS_NVFP4_FP8_MHA_CONFIG QuantizationConfig TorchQuantizationConfig "
                                               "TorchQuantizer",
    },
    NO_STEPS: {
        "backend.backend": "BackendBuildStep",
        "backend.torch_inductor_aot_backend": "TorchInductorAotBuildStep",
        "backend.torch_tensorrt_aot_backend": "TorchTensorRTAotBuildStep",
    },
    NO_DUMMY: {
        "backend.backend": "DummyBackend",
        "tune_strategy.tune_strategy": "DummyTuneStrategy",
    },
    TRT_INSIDE: {
        "backend.tensorrt.cuda_graphs": "CudaGraphCachePolicy CudaGraphProfile TensorRTCudaGraphCache",
        "backend.tensorrt.onnx_autocast": "MixedPrecision ONNXAutoCast",
        "backend.tensorrt.tensorrt_backend": "G_LOGGER ONNX_FILE_EXTENSION TRT_ENGINE_FILE_EXTENSION "
                                             "TensorRTBuildStep TensorRTRunner",
        "backend.tensorrt.tensorrt_builder": "TensorRTBuilder trt",
        "backend.tensorrt.tensorrt_engine_info": "TensorRTEngineInfo trt",
        "backend.tensorrt.tensorrt_runtime": "LOGGING_PREFIX PythonTRTLogger TRT_ENGINE_FILE_EXTENSION "
                                             "TensorRTRuntime trt",
        "backend.tensorrt.torch_output_allocator": "DTYPE_ELEMENT_SIZE TorchOutputAllocator trt",
    },
    JIT_INSPECT: {
        "jit.html_generator": "HTMLGenerator",
        "jit.inspect_module": "InspectModule PRINT_HIERARCHY_HEADER PRINT_HIERARCHY_NO_MODULES_HEADER get_type_info",
        "jit.patched_module": "GraphBreakException PRINT_HIERARCHY_HEADER PRINT_HIERARCHY_NO_MODULES_HEADER",
    },
    TORCH_TRT_INSIDE: {
        "backend.torch_tensorrt_aot_backend": "assert_torch_tensorrt",
        "backend.torch_tensorrt_jit_backend": "assert_torch_tensorrt",
        "backend.torch_tensorrt_logging": "torch_tensorrt_errors torch_tensorrt_warnings",
    },
    TORCHAO_NAMES: {
        "backend.torchao_backend": "MXFP8DQ_BLOCK_SIZE_DIVISIBILITY NVFP4DQ_BLOCK_SIZE_DIVISIBILITY QuantizationType",
    },
    NO_CONFIG: {
        "config": "AITuneConfig AITuneMode DEFAULT_DEVICE_AFTER_TUNING DEFAULT_MAX_NUM_SAMPLES_STORED "
                  "DEFAULT_MIN_NUM_SAMPLES DEFAULT_TUNING_DATA_OUTPUT_PATH",
    },
    NO_DISTRIBUTED: {
        "distributed": "DistributedContext DistributedCoordinator DistributedOutcome coordinator "
                       "distributed_cache_dir distributed_context distributed_output_path resolve_tuning_device",
        "integrations": "is_integration_distributed_module register_distributed_module_detector",
    },
    LOGGING: {
        "inspecting.inspecting": "LOG_FORMAT",
        "inspecting.wrapping": "LOG_FORMAT",
        "tuning": "LOG_FORMAT",
    },
    INSPECT_INSIDE: {
        "inspecting.module_inspector": "DEFAULT_INSPECT_DEBUG DEFAULT_INSPECT_DEBUG_RAISE DEFAULT_MAX_RECURSION_DEPTH "
                                       "InspectContext ModuleInspector",
    },
    KERNEL_PLAN_DICT: {
        "kernel_forge.kernel_optimization_plan": "PROVIDERS_KEY",
    },
    NO_DIFFUSERS: {
        "kernel_forge.kernel_provider": "DiffusersAttentionBackend DiffusersAttentionKernelProvider",
        "kernel_forge.kernel_provider.diffusers_attention_provider": "DiffusersAttentionBackend "
                                                                     "DiffusersAttentionKernelProvider",
    },
    PROFILER_INSIDE: {
        "kernel_forge.module_function_kernel_profiler": "FUNCTIONAL_PREFIX FunctionData MODULE_PREFIX get_tensor_size",
    },
    NO_LIBS: {
        "libs.cuda.cudart": "cudart",
        "libs.cuda.memory": "memcpy_to_torch",
        "libs.onnx.onnx_exporter": "ONNXExporter ONNX_FILE_EXTENSION",
        "libs.onnx.onnx_model_info": "ONNXModelInfo ONNXPrecision ONNX_DTYPE_TO_PRECISION",
        "libs.torch": "TorchExportResult TorchExporter",
        "libs.torch.torch_exporter": "TorchExportResult TorchExporter",
        "libs.torch_compile": "TorchCompileMode resolve_compile_dynamic",
    },
    ONE_MODULE: {
        "module.exact_sample_metadata": "ExactSampleMetadata",
        "module.forward_signature": "ForwardInputPath ForwardParameter ForwardSignature validate_forward_input_path",
        "module.graph_spec": "GraphSpec",
        "module.passthrough_module": "PassthroughModule",
        "module.recording_module": "INPUT_METADATA_PREFIX OUTPUT_METADATA_PREFIX RecordingModule",
        "module.sample_metadata": "SampleMetadata batch_tensor",
        "module.tensor_spec": "InfoLevel TensorSpec",
        "module.tuned_module": "TunedModule",
        "module.wrapper_module": "DEFAULT_STRATEGY StrategyList StrategyMap get_object_name sanitize_model_name",
    },
    NO_REGISTRY: {
        "module.locator": "Locator ObjectType get_class_data_fields_cached get_class_fields_set_cached "
                          "get_object_fields",
        "module_registry": "MODULE_REGISTRY ModuleRegistry",
    },
    REGION_LABELS: {
        "performance.context": "AOT_MODULE_REGION_PREFIX PROFILED_RUN_REGION_NAME UNTUNED_MODULE_REGION_PREFIX",
        "performance.markdown": "ReportDict",
        "performance.runtime_profile": "PROFILER_KEY_AVERAGES_ROW_LIMIT",
    },
    ONE_PROCEDURE: {
        "task": "MeasuringStopStrategy MeasuringStrategy ModelExecutionTimeMeasuringStrategy "
                "NumStepsMeasuringStopStrategy ProfilingConfig ProfilingResultEvent ProfilingResults ProfilingStatus "
                "StableWindowMeasuringStopStrategy get_inference_events profile",
        "task.correctness": "CorrectnessDynamicShapeError CorrectnessInputMutationError CorrectnessTensorShapeError "
                            "CorrectnessValueError check_dynamic_shape_boundary_inference "
                            "check_inference_output_correctness",
        "task.profiling": "AllSamplesProfilingStopStrategy MeasuringStopStrategy MeasuringStrategy "
                          "ModelExecutionTimeMeasuringStrategy NumStepsMeasuringStopStrategy ProfilingConfig "
                          "ProfilingResultEvent ProfilingResults ProfilingStatus ProfilingStopStrategy "
                          "StableWindowMeasuringStopStrategy ThroughputSaturatedProfilingStopStrategy get_throughput "
                          "is_throughput_saturated profile",
        "task.profiling.config": "ProfilingConfig",
        "task.profiling.events": "ProfilingResultEvent get_inference_events",
        "task.profiling.measuring_stop_strategy": "MeasuringStopStrategy NumStepsMeasuringStopStrategy "
                                                  "StableWindowMeasuringStopStrategy",
        "task.profiling.measuring_strategy": "MeasuringStrategy ModelExecutionTimeMeasuringStrategy",
        "task.profiling.metrics": "get_batch_size get_latency get_mean_executions_per_second get_throughput "
                                  "is_throughput_saturated",
        "task.profiling.profiling": "ProfilingResults ProfilingStatus profile profile_backend",
        "task.profiling.profiling_stop_strategy": "AllSamplesProfilingStopStrategy ProfilingStopStrategy "
                                                  "ThroughputSaturatedProfilingStopStrategy",
        "tune_strategy.profiling_tune_strategy": "BackendPerfResult BackendProfilingResult ProfilingTuneStrategy",
    },
    NO_MIXINS: {
        "task.find_max_batch_size": "find_max_batch_size find_max_throughput_for_backend "
                                    "get_throughput_per_batch_size",
        "tune_strategy.mixin": "FindMaxBatchSizeMixin PerformanceValidationMixin PerformanceValidationMixinResult",
        "tune_strategy.mixin.find_max_batch_size_mixin": "FindMaxBatchSizeMixin",
        "tune_strategy.mixin.performance_validation_mixin": "PerformanceValidationMixin "
                                                            "PerformanceValidationMixinResult",
        "tune_strategy.multi_backend_strategy": "MultiBackendStrategy",
    },
    REPORT: {
        "tune_data.report_models": "BackendBuildReport ExceptionInfo GraphTuneReport ModuleInspectionReport "
                                   "ModuleTuneReport SCHEMA_VERSION TuneRunReport",
        "tune_data.reporting": "has_active_report report_backend_build report_backend_metric "
                               "report_graph_baseline_metric report_graph_tune report_inspection_details "
                               "report_module_tune report_tune_run report_tune_run_end report_tune_run_start "
                               "snapshot_config",
        "tune_strategy.formatting": "fmt_speedup_comparison fmt_speedup_msg fmt_speedup_msg_short",
        "tune_strategy.latency_budget_strategy": "LatencyBudgetProfilingResult",
        "tune_strategy.max_throughput_strategy": "MaxThroughputProfilingResult",
        "tune_strategy.min_latency_strategy": "MinLatencyProfilingResult",
    },
    NO_HELPERS: {
        "utils.cuda_utils": "assert_is_available get_device is_available set_device synchronize",
        "utils.device": "get_device",
        "utils.graph_break_detector": "GraphBreakDetector",
        "utils.memory": "cleanup_memory cpu_cleanup cpu_cleanup_low_level gpu_cleanup release_transient_memory",
        "utils.module": "count_parameters format_num_parameters get_forward_arguments_names get_module_device "
                        "is_distributed_module move_module_to_device move_tensors_to_device offload "
                        "offload_after_tuning",
        "utils.path_utils": "MAX_FILENAME_BYTES format_file_size get_file_size sanitize_filename",
        "utils.shapes": "axis_dims_for_shape_definition axis_dims_for_tensor build_dynamic_shapes log_dynamic_shapes "
                        "make_batch_dim prepare_export_sample",
        "utils.tensor": "format_tensor_name none_at_tensors",
    },
}

#: AITune path below aitune.torch -> ((its names with no counterpart here, why), ...), the reasons in the
#: order of _ABSENT_BY_REASON.
ABSENT: dict[str, tuple[tuple[str, str], ...]] = {
    path: tuple((names, why) for why, names in rows) for path, rows in _by_path(_ABSENT_BY_REASON).items()}


def absent_names(path: str) -> dict[str, str]:
    """AITune's names at path (below aitune.torch) with no counterpart here -> why."""
    return {name: why for names, why in ABSENT.get(path, ()) for name in _names(names)}


def alias_names(path: str) -> dict[str, str]:
    """The names an alias module at path gives -> the module of this package that holds each."""
    return {name: f"{ROOT}.{module}" for module, names in ALIASES.get(path, {}).items() for name in _names(names)}


def _local(fullname: str) -> str | None:
    return fullname[len(ROOT) + 1:] if fullname.startswith(ROOT + ".") else None


def _is_package(path: str) -> bool:
    return any(other.startswith(path + ".") for other in ALIASES)


class _AliasModule(types.ModuleType):
    """A module made from the table: AITune's names here; an absent name, imported or read, raises
    AbsentNameError (an ImportError) with the reason."""

    def __getattr__(self, name: str) -> Any:
        why = absent_names(self.__dict__.get("_aitune_path", "")).get(name)
        if why is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        aitune = "aitune.torch." + self._aitune_path
        raise AbsentNameError(f"AITune's {aitune}.{name} has no counterpart in {ROOT}: {why}", name=name)


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AliasModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        path = _local(module.__name__)
        names = alias_names(path)
        module.__dict__["_aitune_path"] = path
        module.__doc__ = (f"AITune's module path aitune.torch.{path}: its names that this package has "
                          f"(aitune_ray.aitune_paths).")
        for name, source in names.items():
            setattr(module, name, getattr(importlib.import_module(source), name))
        module.__all__ = sorted(names)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds AITune's paths that have no module of their own here; placed after the ordinary finders."""

    loader = _AliasLoader()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        local = _local(fullname)
        if local is None or local not in ALIASES:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self.loader, is_package=_is_package(local))
        if spec.submodule_search_locations is not None:
            spec.submodule_search_locations = []
        return spec


_FINDER = _AliasFinder()


def install() -> None:
    """Put the finder on sys.meta_path (once). A path whose name its parent already uses for something else
    (aitune_ray.config, aitune_ray.performance.profile) is made now and left off its parent, so importing
    it later does not replace the parent's attribute (AITune's packages behave the same)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    for local in ALIASES:
        fullname = f"{ROOT}.{local}"
        parent, _, child = fullname.rpartition(".")
        held = getattr(sys.modules.get(parent), child, None)
        if fullname not in sys.modules and held is not None and not isinstance(held, types.ModuleType):
            spec = _FINDER.find_spec(fullname)
            module = importlib.util.module_from_spec(spec)
            sys.modules[fullname] = module
            spec.loader.exec_module(module)
