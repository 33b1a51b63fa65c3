"""TensorRT engine build and execution with TensorRT's Python API (imported only here, only when used).

Build: a strongly typed network from the ONNX parser (TensorRT builds the precisions the ONNX model
names; fp16/bf16 come from ONNX autocast, never from builder flags, which TensorRT 11 removed), one
optimization profile per ``TensorRTProfile``, a workspace limit, the builder optimization level, TF32,
and a timing cache that is loaded before and merged back after the build, under a file lock, so builds
on several actors of one machine (or a shared folder) add to one cache.

Run: ``set_input_shape`` / ``set_tensor_address`` / ``execute_async_v3`` on the caller's current CUDA
stream, outputs allocated as torch tensors. With CUDA graphs on, each static profile gets an execution
context of its own, captured once into a ``torch.cuda.CUDAGraph`` and replayed from then on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from aitune_ray.backend.backend import require
from aitune_ray.backend.tensorrt_profiles import TensorRTProfile, for_inputs, select_profile
from aitune_ray.errors import BuildError

logger = logging.getLogger(__name__)

EXTRA = "tensorrt"

#: TensorRT DataType member name -> torch dtype.
_DTYPES = {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16, "INT8": torch.int8,
           "INT32": torch.int32, "INT64": torch.int64, "BOOL": torch.bool, "UINT8": torch.uint8,
           "FP8": torch.float8_e4m3fn}


def tensorrt(what: str = "TensorRTBackend") -> Any:
    return require("tensorrt", EXTRA, what)


@dataclasses.dataclass
class BuildSettings:
    """What the builder config takes (a plain copy of TensorRTBackendConfig's build fields)."""

    workspace_size: int | None = None
    optimization_level: int | None = None
    compatibility_level: str | None = None
    enable_tf32: bool = True
    timing_cache: Path | None = None


def _trt_logger(trt: Any) -> Any:
    return trt.Logger(trt.Logger.WARNING)


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_cache(path: Path | None) -> bytes:
    if path is None or not path.exists():
        return b""
    with _locked(path):
        return path.read_bytes()


def _merge_cache(config: Any, path: Path) -> None:
    """Combine this build's timing cache with what is on disk now, and write it back atomically."""
    cache = config.get_timing_cache()
    with _locked(path):
        if path.exists():
            cache.combine(config.create_timing_cache(path.read_bytes()), True)
        data = bytes(memoryview(cache.serialize()))
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    logger.info("TensorRT timing cache saved: %s (%d bytes)", path, len(data))


def _parse(trt: Any, builder: Any, onnx_path: Path, log: Any) -> tuple[Any, Any]:
    flags = 0
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if strongly_typed is not None:  # TensorRT 10; every network is strongly typed in TensorRT 11
        flags |= 1 << int(strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, log)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"TensorRT's ONNX parser rejected {onnx_path.name}: {errors}")
    return network, parser


def _add_profiles(trt: Any, builder: Any, config: Any, network: Any, profiles: Sequence[TensorRTProfile]) -> None:
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    for profile in profiles:
        trt_profile = builder.create_optimization_profile()
        for tensor in inputs:
            if tensor.name not in profile.shapes:
                if any(d < 0 for d in tensor.shape):
                    raise BuildError(f"network input {tensor.name!r} is dynamic but no profile gives its shapes")
                continue
            low, opt, high = profile.shapes[tensor.name]
            trt_profile.set_shape(tensor.name, low, opt, high)
        config.add_optimization_profile(trt_profile)


def build_engine(onnx_path: Path, engine_path: Path, profiles: Sequence[TensorRTProfile],
                 settings: BuildSettings) -> Path:
    """Build a serialized engine (the plan) from the ONNX model; write it to engine_path."""
    trt = tensorrt()
    log = _trt_logger(trt)
    builder = trt.Builder(log)
    network, _parser = _parse(trt, builder, Path(onnx_path), log)
    config = builder.create_builder_config()
    if settings.workspace_size:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(settings.workspace_size))
    if settings.optimization_level is not None:
        config.builder_optimization_level = int(settings.optimization_level)
    if settings.compatibility_level:
        config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel,
                                                      settings.compatibility_level.upper())
    tf32 = getattr(trt.BuilderFlag, "TF32", None)
    if tf32 is not None:
        (config.set_flag if settings.enable_tf32 else config.clear_flag)(tf32)
    cache_path = Path(settings.timing_cache) if settings.timing_cache else None
    cache = config.create_timing_cache(_read_cache(cache_path))
    config.set_timing_cache(cache, True)
    _add_profiles(trt, builder, config, network, profiles)
    logger.info("building TensorRT engine from %s with %d profile(s)", Path(onnx_path).name, len(profiles))
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise BuildError(f"TensorRT could not build an engine from {Path(onnx_path).name} (see the log)")
    Path(engine_path).parent.mkdir(parents=True, exist_ok=True)
    Path(engine_path).write_bytes(bytes(memoryview(plan)))
    if cache_path is not None:
        _merge_cache(config, cache_path)
    return Path(engine_path)


@dataclasses.dataclass
class _Captured:
    """A static profile's own execution context, input and output buffers, and its CUDA graph."""

    context: Any
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]
    graph: Any = None


class EngineRunner:
    """Runs a deserialized engine on torch tensors (inputs by ONNX input name, outputs by name)."""

    def __init__(self, plan: bytes, profiles: Sequence[TensorRTProfile], device: torch.device,
                 use_cuda_graphs: bool = False, max_cuda_graphs: int = 8):
        if device.type != "cuda":
            raise BuildError(f"TensorRT runs on a CUDA device, not {device}")
        trt = tensorrt()
        self._trt = trt
        self.device = device
        self.profiles = list(profiles)
        with torch.cuda.device(device):
            self._runtime = trt.Runtime(_trt_logger(trt))
            self.engine = self._runtime.deserialize_cuda_engine(plan)
            if self.engine is None:
                raise BuildError("TensorRT could not deserialize the engine plan (built by another TensorRT "
                                 "version or for another GPU?)")
            self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if n not in self.input_names]
        # the exporter may drop inputs the graph never reads: profiles speak of the engine's inputs only
        self.profiles = for_inputs(self.profiles, self.input_names)
        self.dtypes = {n: self._dtype(n) for n in names}
        static = [i for i, p in enumerate(self.profiles) if p.is_static]
        self._graph_profiles = set(static[:max_cuda_graphs]) if use_cuda_graphs else set()
        self._captured: dict[int, _Captured] = {}
        self._graphs_failed = False

    def _dtype(self, name: str) -> torch.dtype:
        kind = self.engine.get_tensor_dtype(name)
        try:
            return _DTYPES[kind.name]
        except KeyError:
            raise BuildError(f"TensorRT tensor {name!r} has type {kind}, which has no torch dtype here") from None

    def _prepare(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: inputs[n].to(self.device, self.dtypes[n]).contiguous() for n in self.input_names}

    def _bind(self, context: Any, index: int, inputs: dict[str, torch.Tensor], stream: torch.cuda.Stream) -> dict:
        if self.profiles and context.active_optimization_profile != index:
            if not context.set_optimization_profile_async(index, stream.cuda_stream):
                raise BuildError(f"TensorRT rejected optimization profile {index}")
        for name, tensor in inputs.items():
            if not context.set_input_shape(name, tuple(tensor.shape)):
                raise BuildError(f"TensorRT rejected shape {tuple(tensor.shape)} for input {name!r}")
            context.set_tensor_address(name, tensor.data_ptr())
        outputs = {}
        for name in self.output_names:
            shape = tuple(context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise BuildError(f"output {name!r} has a data-dependent shape {shape}, which this backend does "
                                 "not allocate")
            outputs[name] = torch.empty(shape, dtype=self.dtypes[name], device=self.device)
            context.set_tensor_address(name, outputs[name].data_ptr())
        return outputs

    def run(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Outputs by name, computed on the caller's current stream (no synchronize)."""
        inputs = self._prepare(inputs)
        index = select_profile(self.profiles, {n: tuple(t.shape) for n, t in inputs.items()})
        with torch.cuda.device(self.device):
            stream = torch.cuda.current_stream(self.device)
            if index in self._graph_profiles and not self._graphs_failed:
                captured = self._captured.get(index) or self._capture(index, inputs, stream)
                if captured is not None:
                    for name, tensor in inputs.items():
                        captured.inputs[name].copy_(tensor)
                    captured.graph.replay()
                    return {n: t.clone() for n, t in captured.outputs.items()}
            outputs = self._bind(self.context, index, inputs, stream)
            if not self.context.execute_async_v3(stream.cuda_stream):
                raise BuildError("TensorRT execution failed")
            return outputs

    def _capture(self, index: int, inputs: dict[str, torch.Tensor], stream: torch.cuda.Stream) -> _Captured | None:
        """Capture the static profile index into a CUDA graph; None (and no more graphs) when that fails."""
        context = self.engine.create_execution_context()
        buffers = {n: torch.empty_like(t) for n, t in inputs.items()}
        side = torch.cuda.Stream(self.device)
        side.wait_stream(stream)
        try:
            with torch.cuda.stream(side):
                for name, tensor in inputs.items():
                    buffers[name].copy_(tensor)
                outputs = self._bind(context, index, buffers, side)
                if not context.execute_async_v3(side.cuda_stream):   # the warm-up TensorRT asks for
                    raise BuildError("TensorRT execution failed before CUDA graph capture")
            side.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                if not context.execute_async_v3(side.cuda_stream):
                    raise BuildError("TensorRT execution failed during CUDA graph capture")
        except Exception as exc:  # noqa: BLE001 - any capture failure means: go on without graphs
            logger.warning("CUDA graph capture of TensorRT profile %d failed, running without graphs: %s", index, exc)
            self._graphs_failed = True
            return None
        stream.wait_stream(side)
        captured = _Captured(context, buffers, outputs, graph)
        self._captured[index] = captured
        logger.info("captured a CUDA graph for TensorRT profile %d", index)
        return captured

    @property
    def captured_profiles(self) -> list[int]:
        return sorted(i for i, c in self._captured.items() if c.graph is not None)

    def close(self) -> None:
        if self._captured:
            torch.cuda.synchronize(self.device)
        self._captured.clear()
        self.context = None
        self.engine = None
