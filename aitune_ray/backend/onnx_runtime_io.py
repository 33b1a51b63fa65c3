"""Running an ONNX Runtime session on torch tensors through IO binding, without copies.

- Inputs are bound by ``data_ptr()`` with their ONNX element type (float16 and bfloat16 included). A tensor
  on another device, of another dtype, not contiguous or of another shape than the session takes is an
  error that names the input: nothing is copied or converted behind the caller's back.
- Outputs are torch tensors allocated on the device, of the shape the session's output metadata gives for
  the bound inputs; an output whose shape cannot be told in advance is allocated by ONNX Runtime on the
  device and taken over through DLPack, without a copy.
- On a GPU, ONNX Runtime computes on a stream of its own (``user_compute_stream``): it waits for the
  caller's current stream before a run, and the caller's stream waits for it after, with CUDA events and
  no host synchronization (runs are asynchronous, like torch's). Outputs are complete for any later work
  on the caller's stream, and inputs are not touched by later work on it while the run still reads them.
  Where a session cannot take a stream (``stream=None`` on a GPU), each run waits on the host for the
  caller's stream first, and ONNX Runtime synchronizes its own stream before the run returns.
- With CUDA graphs, each recorded batch size gets its own captured graph (``gpu_graph_id``): fixed input
  and output buffers bound once, inputs copied in, outputs copied out. Any other shape runs uncaptured
  (``gpu_graph_id=-1``).
"""

from __future__ import annotations

import logging
import torch

from aitune_ray.errors import BuildError, InputMismatchError

logger = logging.getLogger(__name__)

#: ONNX Runtime type string -> (torch dtype, ONNX TensorProto element type).
ONNX_TYPES = {
    "tensor(float)": (torch.float32, 1), "tensor(uint8)": (torch.uint8, 2), "tensor(int8)": (torch.int8, 3),
    "tensor(int16)": (torch.int16, 5), "tensor(int32)": (torch.int32, 6), "tensor(int64)": (torch.int64, 7),
    "tensor(bool)": (torch.bool, 9), "tensor(float16)": (torch.float16, 10), "tensor(double)": (torch.float64, 11),
    "tensor(bfloat16)": (torch.bfloat16, 16),
}
SKIP_GRAPH = "-1"


class _Arg:
    """One graph input or output: name, torch dtype, ONNX element type, dims (int, or None/str when dynamic)."""

    def __init__(self, node):
        if node.type not in ONNX_TYPES:
            raise BuildError(f"ONNX Runtime session value {node.name!r} has type {node.type}, which "
                             f"ONNXRuntimeBackend cannot bind (supported: {sorted(ONNX_TYPES)})")
        self.name = node.name
        self.dtype, self.element_type = ONNX_TYPES[node.type]
        self.dims = [d if isinstance(d, int) else (d or None) for d in node.shape]


def device_index(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return device.index if device.index is not None else torch.cuda.current_device()


class BoundSession:
    """Calls one session with torch tensors (see the module docstring)."""

    def __init__(self, ort, session, device: torch.device, stream: "torch.cuda.Stream | None",
                 graph_batch_sizes: list[int] | None, dynamic_inputs: list[str]):
        self._ort = ort
        self._session = session
        self.device = device
        self._device_type = "cuda" if device.type == "cuda" else "cpu"
        self._device_id = device_index(device)
        self._stream = stream
        self.inputs = [_Arg(i) for i in session.get_inputs()]
        self.outputs = [_Arg(o) for o in session.get_outputs()]
        self._binding = session.io_binding()
        self._run_options = self._options(SKIP_GRAPH if graph_batch_sizes is not None else None)
        self._graph_sizes = None if graph_batch_sizes is None else set(graph_batch_sizes)
        self._dynamic = [i for i, a in enumerate(self.inputs) if a.name in dynamic_inputs]
        self._graphs: dict[tuple, _CapturedGraph] = {}

    @property
    def ordered_by(self) -> str:
        """How runs are ordered with the caller's stream: "events", "host" (synchronizations) or "none" (CPU)."""
        if self.device.type != "cuda":
            return "none"
        return "events" if self._stream is not None else "host"

    def _options(self, graph_id: str | None):
        options = self._ort.RunOptions()
        if self._stream is not None:   # the caller's stream waits on events; no host synchronization per run
            options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        if graph_id is not None:
            options.add_run_config_entry("gpu_graph_id", graph_id)
        return options

    @property
    def graphs_captured(self) -> list[int]:
        """Batch sizes with a CUDA graph (captured, or being warmed up for capture)."""
        return sorted(g.batch_size for g in self._graphs.values())

    # ----- checks ----------------------------------------------------------------------------
    def check(self, feed: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        tensors = []
        for arg in self.inputs:
            t = feed.get(arg.name)
            if t is None:
                raise InputMismatchError(f"the ONNX model takes input {arg.name!r}, which this call does not "
                                         f"provide (it has {sorted(feed)})")
            where = f"input {arg.name!r}"
            if t.device.type != self.device.type or device_index(t.device) != self._device_id:
                raise InputMismatchError(f"{where} is on {t.device}; the session runs on {self.device} "
                                         "(move it there before the call)")
            if t.dtype != arg.dtype:
                raise InputMismatchError(f"{where} is {t.dtype}; the ONNX model takes {arg.dtype} "
                                         "(convert it before the call)")
            if not t.is_contiguous():
                raise InputMismatchError(f"{where} is not contiguous (strides {t.stride()}); "
                                         "call .contiguous() before the call")
            if t.dim() != len(arg.dims) or any(isinstance(d, int) and d != s for d, s in zip(arg.dims, t.shape)):
                raise InputMismatchError(f"{where} has shape {list(t.shape)}; the ONNX model takes {arg.dims}")
            tensors.append(t)
        return tensors

    def _output_shapes(self, tensors: list[torch.Tensor]) -> list[list[int] | None]:
        """Output shapes from the session's metadata, with the inputs' named dims filled in (None: unknown)."""
        sizes: dict[str, int] = {}
        for arg, t in zip(self.inputs, tensors):
            for d, s in zip(arg.dims, t.shape):
                if isinstance(d, str):
                    sizes[d] = int(s)
        shapes = []
        for arg in self.outputs:
            dims = [d if isinstance(d, int) else sizes.get(d) if isinstance(d, str) else None for d in arg.dims]
            shapes.append(None if any(d is None for d in dims) else dims)
        return shapes

    # ----- running ---------------------------------------------------------------------------
    def run(self, feed: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        tensors = self.check(feed)
        graph = self._graph_for(tensors)
        if graph is None:
            return self._ordered(lambda: self._run_uncaptured(tensors))
        graph.load(tensors)                       # on the caller's stream, which ONNX Runtime's then waits for
        outputs = self._ordered(graph.run)
        return [o.clone() for o in outputs]       # the graph's buffers are overwritten by its next replay

    def _ordered(self, run):
        """run() on ONNX Runtime's stream after the work queued on the caller's, and before what follows."""
        if self._stream is None:
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()   # inputs complete; ORT syncs at the end
            return run()
        caller = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(caller)
        try:
            return run()
        finally:
            caller.wait_stream(self._stream)

    def bind(self, binding, tensors: list[torch.Tensor], outputs: list[torch.Tensor | None]) -> None:
        for arg, t in zip(self.inputs, tensors):
            binding.bind_input(arg.name, self._device_type, self._device_id, arg.element_type, list(t.shape),
                               t.data_ptr())
        for arg, out in zip(self.outputs, outputs):
            if out is None:   # ONNX Runtime allocates it on the device; taken over through DLPack after the run
                binding.bind_output(arg.name, self._device_type, self._device_id)
            else:
                binding.bind_output(arg.name, self._device_type, self._device_id, arg.element_type,
                                    list(out.shape), out.data_ptr())

    def allocate(self, tensors: list[torch.Tensor]) -> list[torch.Tensor | None]:
        return [None if shape is None else torch.empty(shape, dtype=arg.dtype, device=self.device)
                for arg, shape in zip(self.outputs, self._output_shapes(tensors))]

    def _run_uncaptured(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        outputs = self.allocate(tensors)
        self.bind(self._binding, tensors, outputs)
        self._session.run_with_iobinding(self._binding, self._run_options)
        return self.take(self._binding, outputs)

    @staticmethod
    def take(binding, outputs: list[torch.Tensor | None]) -> list[torch.Tensor]:
        if all(o is not None for o in outputs):
            return outputs
        values = binding.get_outputs()
        return [torch.from_dlpack(v) if o is None else o for o, v in zip(outputs, values)]

    # ----- CUDA graphs -----------------------------------------------------------------------
    def _graph_for(self, tensors: list[torch.Tensor]) -> "_CapturedGraph | None":
        if self._graph_sizes is None:
            return None
        key = tuple(tuple(t.shape) for t in tensors)
        graph = self._graphs.get(key)
        if graph is None:
            batch = int(tensors[self._dynamic[0]].shape[0]) if self._dynamic else min(self._graph_sizes)
            if batch not in self._graph_sizes:
                return None
            graph = self._graphs[key] = _CapturedGraph(self, len(self._graphs), batch, tensors)
        return graph


class _CapturedGraph:
    """One CUDA graph of one session: fixed buffers bound once, its own gpu_graph_id."""

    def __init__(self, owner: BoundSession, graph_id: int, batch_size: int, tensors: list[torch.Tensor]):
        self.owner = owner
        self.batch_size = batch_size
        self.graph_id = graph_id
        self.inputs = [torch.empty_like(t) for t in tensors]
        shapes = owner._output_shapes(tensors)
        if any(s is None for s in shapes):   # learn them from one uncaptured run
            shapes = [list(o.shape) for o in owner._ordered(lambda: owner._run_uncaptured(tensors))]
        self.outputs = [torch.empty(s, dtype=a.dtype, device=owner.device) for a, s in zip(owner.outputs, shapes)]
        self.binding = owner._session.io_binding()
        owner.bind(self.binding, self.inputs, self.outputs)
        self.options = owner._options(str(graph_id))
        self.runs = 0
        logger.info("CUDA graph %d for batch size %d (input shapes %s)", graph_id, batch_size,
                    [list(t.shape) for t in tensors])

    def load(self, tensors: list[torch.Tensor]) -> None:
        for buf, t in zip(self.inputs, tensors):
            buf.copy_(t)

    def run(self) -> list[torch.Tensor]:
        try:
            self.owner._session.run_with_iobinding(self.binding, self.options)
        except Exception as exc:
            raise BuildError(f"ONNX Runtime could not run CUDA graph {self.graph_id} (batch size "
                             f"{self.batch_size}, run {self.runs + 1}): {exc}") from exc
        self.runs += 1
        return self.outputs
