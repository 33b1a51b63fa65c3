"""ONNXRuntimeBackend: ONNX export, then an ONNX Runtime session on the chosen execution provider.

Calls go through IO binding (``onnx_runtime_io``): torch tensors are bound by device pointer, outputs are
device tensors, and on a GPU nothing goes through the host. ``use_cuda_graphs`` captures one CUDA graph per
recorded batch size (at the build, and again at first use after a checkpoint load). The checkpoint holds
the ONNX model (after the optional transformer optimizer) and the config; loading opens a new session.

Calls are bound by name (keywords in any order are one call), and outputs come back as the module returns
them (a ModelOutput as its class). The graph holds the exported call's non-tensor arguments as constants: a
call with other values (``scale=0.7`` where ``scale=0.5`` was recorded) runs the eager module instead, and
the first such call logs one warning (backend.baked_call).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig, require
from aitune_ray.backend.baked_call import OffGraph
from aitune_ray.backend.onnx_export import ExportedModel, export_onnx
from aitune_ray.backend.onnx_runtime_io import BoundSession, device_index
from aitune_ray.backend.onnx_runtime_options import (SAFE_PROVIDER_OPTIONS, ONNXExecutionProvider,
                                                     check_graph_optimization_level,
                                                     check_transformer_optimizer, normalize_provider_options,
                                                     provider_of, session_options, session_providers)
from aitune_ray.errors import BuildError, ConfigError
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)

__all__ = ["ONNXExecutionProvider", "ONNXRuntimeBackend", "ONNXRuntimeBackendConfig"]

#: Runs per recorded batch size at the build with CUDA graphs: ONNX Runtime's warm-up run(s), the capture, a replay.
GRAPH_WARMUP_RUNS = 3


ATTENTION_OPSET = 23   # the first ONNX opset with an Attention op


@dataclasses.dataclass
class ONNXRuntimeBackendConfig(BackendConfig):
    """use_dynamo: export with torch.export (True) or the TorchScript tracer (False).
    execution_provider: None picks CUDA on a GPU device and CPU on the CPU.
    opset_version: None: 23 for the dynamo exporter on a GPU execution provider with onnxruntime 1.27 or
        later (opset 23 has the Attention op, which scaled_dot_product_attention becomes and ONNX Runtime
        runs with its flash kernel there), else the exporter's default.
    use_cuda_graphs: capture one CUDA graph per recorded batch size (CUDA EP's enable_cuda_graph); other
        shapes run uncaptured.
    provider_options: {provider ("cuda", "tensorrt", "cpu" or its full name): {option: value}}, e.g.
        {"cuda": {"use_tf32": False}, "tensorrt": {"trt_fp16_enable": True}}; unknown keys are errors.
    graph_optimization_level: ONNX Runtime's session level ("disable_all" ... "enable_all"), None: its default.
    transformer_optimizer: a model type ("bert", "vit", ...) to run onnxruntime.transformers' optimizer
        (fused attention, LayerNorm, GELU) on the exported model; None: off.
    transformer_heads / transformer_hidden: the model's attention heads and hidden size, for that optimizer's
        attention fusion (0: it reads them from the graph, which it cannot do for every model type).
    allow_spinning: let ONNX Runtime's intra-op threads spin after a call returns (its own default). Off here:
        the spinning threads slow whatever the process runs next for tens of milliseconds (up to 2x on the
        CPU), so a module faster alone in a loop makes the model around it slower, and a timing round charges
        that cost to the next callable. On only where the session runs alone on its CPUs."""

    safe_fields = {"provider_options": SAFE_PROVIDER_OPTIONS, **{name: SAFE for name in (
        "use_dynamo", "execution_provider", "opset_version", "use_cuda_graphs", "graph_optimization_level",
        "transformer_optimizer", "transformer_heads", "transformer_hidden", "allow_spinning")}}

    use_dynamo: bool = True
    execution_provider: ONNXExecutionProvider | None = None
    opset_version: int | None = None
    use_cuda_graphs: bool = False
    provider_options: dict = dataclasses.field(default_factory=dict)
    graph_optimization_level: str | None = None
    transformer_optimizer: str | None = None
    transformer_heads: int = 0
    transformer_hidden: int = 0
    allow_spinning: bool = False

    def __post_init__(self):
        if self.execution_provider is not None:
            self.execution_provider = provider_of(self.execution_provider)
        self.provider_options = normalize_provider_options(self.provider_options)
        check_graph_optimization_level(self.graph_optimization_level)
        check_transformer_optimizer(self.transformer_optimizer)
        if self.transformer_heads < 0 or self.transformer_hidden < 0:
            raise ConfigError("transformer_heads and transformer_hidden must not be negative (0: detected)")
        if self.transformer_hidden and self.transformer_heads and self.transformer_hidden % self.transformer_heads:
            raise ConfigError(f"transformer_hidden={self.transformer_hidden} is not a multiple of "
                              f"transformer_heads={self.transformer_heads}")
        if self.use_cuda_graphs and self.execution_provider == ONNXExecutionProvider.CPU:
            raise ConfigError("use_cuda_graphs needs a GPU execution provider, not CPUExecutionProvider")


class ONNXRuntimeBackend(Backend):
    config_class = ONNXRuntimeBackendConfig
    libraries = ("onnxruntime", "onnx")
    is_jit = False
    build_cost = 0.5

    def _provider(self, device: torch.device) -> ONNXExecutionProvider:
        if self.config.execution_provider is not None:
            return self.config.execution_provider
        return ONNXExecutionProvider.CUDA if device.type == "cuda" else ONNXExecutionProvider.CPU

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        self._check_provider(device)   # before the export, which takes a while on a large model
        opset = self._opset(device)
        if opset is None or self.config.opset_version is not None:
            self._export_and_open(module, samples, device, workdir, opset)
            return
        try:   # the opset this backend chose itself: a model it does not suit is exported again
            self._export_and_open(module, samples, device, workdir, opset, trial=True)
        except Exception as exc:  # noqa: BLE001 - any failure of that export or of its first runs
            logger.warning("%s: the opset-%d export does not run here (%s: %s); exporting again at the "
                           "exporter's default opset", self.name, opset, type(exc).__name__, str(exc)[:300])
            self._session = self._bound = None
            self._export_and_open(module, samples, device, workdir, None)

    def _export_and_open(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path,
                         opset: int | None, trial: bool = False) -> None:
        """Export, optimize, open the session, and capture the CUDA graphs; trial: run each recorded batch
        size once (an opset-23 Attention node may reject a mask that the default opset's export takes, for
        example a (batch, 1, 1, seq) padding mask)."""
        self._exported = export_onnx(module, samples, Path(workdir) / "model.onnx",
                                     use_dynamo=self.config.use_dynamo, opset_version=opset)
        self._off_graph = OffGraph(self.name, module, self._exported.call)
        if self.config.transformer_optimizer:
            self._optimize_transformer(device)
        self._open(device)
        if self.config.use_cuda_graphs:
            self._capture(samples)
        elif trial:
            for batch in samples.batch_sizes():
                inputs = self._graph_inputs(samples.first_of_batch_size(batch).to(device))
                if inputs is not None:
                    self._bound.run(inputs)

    def _graph_inputs(self, sample) -> dict[str, torch.Tensor] | None:
        return self._exported.call_inputs(sample.args, sample.kwargs)

    def _opset(self, device: torch.device) -> int | None:
        """The export's opset: the config's, else 23 where ONNX Runtime's GPU EP runs ONNX's Attention op.

        Measured on an H200 (ViT-B/16 sized, fp16, batch 32): the default opset's export leaves attention as
        MatMul, Softmax and MatMul on Turing-era GEMM kernels, 7.46 GPU ms per call; opset 23 runs it as one
        flash-attention kernel, 4.27 (docs/measurement.md, ONNX Runtime on the GPU)."""
        if self.config.opset_version is not None:
            return self.config.opset_version
        if not self.config.use_dynamo or self._provider(device) == ONNXExecutionProvider.CPU:
            return None
        import onnxruntime

        found = re.match(r"(\d+)\.(\d+)", onnxruntime.__version__)
        if found is None:
            return None
        return ATTENTION_OPSET if (int(found[1]), int(found[2])) >= (1, 27) else None

    def _check_provider(self, device: torch.device) -> ONNXExecutionProvider:
        ort = require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        provider = self._provider(device)
        available = ort.get_available_providers()
        if provider.value not in available:
            extra = "onnx-gpu" if provider != ONNXExecutionProvider.CPU else "onnx"
            raise BuildError(f"ONNX Runtime has no {provider.value} here (available: {', '.join(available)}); "
                             f"install aitune-ray[{extra}] or choose another execution provider")
        if (provider == ONNXExecutionProvider.CPU) != (device.type == "cpu"):
            raise BuildError(f"{provider.value} cannot serve tensors on {device}: IO binding keeps them where "
                             "they are, so the execution provider must match the device")
        if self.config.use_cuda_graphs and provider == ONNXExecutionProvider.CPU:
            raise BuildError("use_cuda_graphs needs a CUDA device and a GPU execution provider")
        return provider

    def _optimize_transformer(self, device: torch.device) -> None:
        require("onnxruntime.transformers.optimizer", "onnx", "ONNXRuntimeBackend(transformer_optimizer=...)")
        from onnxruntime.transformers import optimizer

        path = self._exported.path
        large = len(self._exported.files()) > 1
        try:
            model = optimizer.optimize_model(str(path), model_type=self.config.transformer_optimizer,
                                             num_heads=self.config.transformer_heads,
                                             hidden_size=self.config.transformer_hidden, use_gpu=device.type == "cuda")
            fused = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
            _drop_unused_opsets(model.model)
            model.save_model_to_file(str(path), use_external_data_format=large, all_tensors_to_one_file=True)
        except Exception as exc:
            raise BuildError(f"ONNX Runtime's transformer optimizer ({self.config.transformer_optimizer}) failed "
                             f"on {path.name}: {type(exc).__name__}: {exc}") from exc
        logger.info("transformer optimizer (%s) fused %s", self.config.transformer_optimizer, fused or "nothing")

    def _open(self, device: torch.device) -> None:
        ort = require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        provider = self._check_provider(device)
        stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None
        try:
            session = self._session_on(ort, provider, device, stream)
        except BuildError as first:
            if stream is None:
                raise
            # a session that cannot take the caller's stream still runs, ordered by host synchronizations
            logger.warning("ONNX Runtime did not take a compute stream (%s); runs synchronize on the host", first)
            stream = None
            session = self._session_on(ort, provider, device, None)
        self._stream = stream
        self._session = session
        graph_sizes = (self._exported.batch_sizes or [1]) if self.config.use_cuda_graphs else None
        dynamic = [n for n in self._exported.graph_inputs if n in self._exported.dynamic_axes]
        self._bound = BoundSession(ort, session, device, stream, graph_sizes, dynamic)

    def _session_on(self, ort, provider: ONNXExecutionProvider, device: torch.device, stream):
        providers, options = session_providers(
            provider, self.config.provider_options, device_index(device), stream.cuda_stream if stream else None,
            self.config.use_cuda_graphs, self._exported.path.parent, tf32=torch.backends.cuda.matmul.allow_tf32)
        try:
            # one options entry per provider, or ONNX Runtime rejects the list and retries with its own
            session = ort.InferenceSession(str(self._exported.path),
                                           sess_options=session_options(ort, self.config.graph_optimization_level,
                                                                         self.config.allow_spinning),
                                           providers=providers, provider_options=options)
        except Exception as exc:
            why = " with CUDA graphs (every node must run on the CUDA EP, no control flow)" \
                if self.config.use_cuda_graphs else ""
            raise BuildError(f"ONNX Runtime could not open {self._exported.path.name} on {provider.value}{why}: "
                             f"{type(exc).__name__}: {exc}") from exc
        if provider.value not in session.get_providers():  # never fall back to the CPU silently
            raise BuildError(f"ONNX Runtime session did not take {provider.value} (it has "
                             f"{session.get_providers()})")
        return session

    def _capture(self, samples: SampleStore) -> None:
        """Capture each recorded batch size's graph now, so that a model ONNX Runtime cannot capture fails
        its build rather than its first call."""
        for batch in samples.batch_sizes():
            inputs = self._graph_inputs(samples.first_of_batch_size(batch).to(self.device))
            for _ in range(GRAPH_WARMUP_RUNS if inputs is not None else 0):
                self._bound.run(inputs)
        torch.cuda.synchronize(self.device)
        logger.info("CUDA graphs for batch sizes %s", self._bound.graphs_captured)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        inputs = self._exported.call_inputs(args, kwargs)
        if inputs is None:
            return self._off_graph(args, kwargs)
        return self._exported.unflatten(self._bound.run(inputs))

    def _state(self) -> dict:
        return {"exported": self._exported.to_dict()}

    def _artifacts(self) -> dict[str, Path]:
        return self._exported.files()

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        self._exported = ExportedModel.from_dict(state["exported"], Path(artifacts["model.onnx"]), module)
        self._off_graph = OffGraph(self.name, module, self._exported.call)
        self._open(device)


def _drop_unused_opsets(model) -> None:
    """Keep only the operator sets the graph uses: ONNX Runtime's optimizer imports every domain it knows
    (its preview, training and ATen ones too), which a checkpoint load would take for custom-op libraries."""
    used = {""}
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            used.add(node.domain)
            for attribute in node.attribute:
                graphs += ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
    for function in model.functions:
        used.update(node.domain for node in function.node)
    keep = [o for o in model.opset_import if o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)
