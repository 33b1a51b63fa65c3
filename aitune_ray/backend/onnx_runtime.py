"""ONNXRuntimeBackend: ONNX export, then an ONNX Runtime session on the chosen execution provider."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch import nn

from aitune_ray.backend.backend import Backend, BackendConfig, require
from aitune_ray.errors import BuildError
from aitune_ray.samples import SampleStore, tensors_of


class ONNXExecutionProvider(str, enum.Enum):
    CPU = "CPUExecutionProvider"
    CUDA = "CUDAExecutionProvider"
    TENSORRT = "TensorrtExecutionProvider"


@dataclasses.dataclass
class ONNXRuntimeBackendConfig(BackendConfig):
    """use_dynamo: export with torch.export (True) or the TorchScript tracer (False).
    execution_provider: None picks CUDA on a GPU device and CPU on the CPU.
    opset_version: None uses the exporter's default."""

    use_dynamo: bool = True
    execution_provider: ONNXExecutionProvider | None = None
    opset_version: int | None = None

    def __post_init__(self):
        if self.execution_provider is not None:
            self.execution_provider = ONNXExecutionProvider(self.execution_provider)


def _input_names(count: int) -> list[str]:
    return [f"input_{i}" for i in range(count)]


class ONNXRuntimeBackend(Backend):
    config_class = ONNXRuntimeBackendConfig
    is_jit = False
    build_cost = 0.5

    def _provider(self, device: torch.device) -> ONNXExecutionProvider:
        if self.config.execution_provider is not None:
            return self.config.execution_provider
        return ONNXExecutionProvider.CUDA if device.type == "cuda" else ONNXExecutionProvider.CPU

    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        require("onnx", "onnx", "ONNXRuntimeBackend")
        self._check_provider(device)   # before the export, which takes a while on a large model
        sample = max(samples, key=lambda s: s.batch_size)
        inputs = tensors_of((sample.args, sample.kwargs))
        names = _input_names(len(inputs))
        dynamic_axes = None
        if len(samples.batch_sizes()) > 1 and sample.batch_size > 1:
            dynamic_axes = {n: {0: "batch"} for n, t in zip(names, inputs)
                            if t.dim() > 0 and t.shape[0] == sample.batch_size}
        self._model_path = Path(workdir) / "model.onnx"
        program = torch.onnx.export(module, tuple(sample.args), None if self.config.use_dynamo else str(self._model_path),
                                    kwargs=dict(sample.kwargs), dynamo=self.config.use_dynamo, input_names=names,
                                    dynamic_axes=dynamic_axes, opset_version=self.config.opset_version)
        if self.config.use_dynamo:
            program.save(str(self._model_path))
        self._out_spec = pytree.treespec_dumps(pytree.tree_flatten(sample.outputs)[1])
        self._open(device)

    def _check_provider(self, device: torch.device) -> ONNXExecutionProvider:
        ort = require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        provider = self._provider(device)
        available = ort.get_available_providers()
        if provider.value not in available:
            extra = "onnx-gpu" if provider != ONNXExecutionProvider.CPU else "onnx"
            raise BuildError(f"ONNX Runtime has no {provider.value} here (available: {', '.join(available)}); "
                             f"install aitune-ray[{extra}] or choose another execution provider")
        return provider

    def _open(self, device: torch.device) -> None:
        ort = require("onnxruntime", "onnx", "ONNXRuntimeBackend")
        provider = self._check_provider(device)
        providers = [provider.value]
        options = [{}]  # one entry per provider, or ONNX Runtime rejects the list and retries with its own
        if provider != ONNXExecutionProvider.CPU:
            options = [{"device_id": device.index or 0}]
        if provider == ONNXExecutionProvider.TENSORRT:
            providers.append(ONNXExecutionProvider.CUDA.value)
            options.append({"device_id": device.index or 0})
        session = ort.InferenceSession(str(self._model_path), providers=providers,
                                       provider_options=options or None)
        if provider.value not in session.get_providers():  # never fall back to the CPU silently
            raise BuildError(f"ONNX Runtime session did not take {provider.value} (it has "
                             f"{session.get_providers()})")
        self._session = session
        self._feed_names = [i.name for i in session.get_inputs()]
        self._spec = pytree.treespec_loads(self._out_spec)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        inputs = tensors_of((args, kwargs))
        by_name = dict(zip(_input_names(len(inputs)), inputs))
        feed = {n: by_name[n].detach().cpu().numpy() for n in self._feed_names}
        outputs = self._session.run(None, feed)
        leaves = [torch.from_numpy(np.ascontiguousarray(o)).to(self.device) for o in outputs]
        return pytree.tree_unflatten(leaves, self._spec)

    def _state(self) -> dict:
        return {"output_spec": self._out_spec}

    def _artifacts(self) -> dict[str, Path]:
        files = {"model.onnx": self._model_path}
        data = self._model_path.with_name(self._model_path.name + ".data")  # weights of models over 2 GB
        if data.exists():
            files[data.name] = data
        return files

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device) -> None:
        self._model_path = Path(artifacts["model.onnx"])
        self._out_spec = state["output_spec"]
        self._open(device)
