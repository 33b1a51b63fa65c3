"""ModelOpt ONNX autocast for real, on the CPU: the fp16 model TensorRT would build runs in ONNX Runtime and
matches eager within fp16 tolerance, and the recorded samples (not random data) decide what stays fp32."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from aitune_ray.backend import ONNXAutoCastConfig, TensorRTBackend, TensorRTBackendConfig
from aitune_ray.backend.onnx_autocast import autocast_onnx
from aitune_ray.model.samples import Sample, SampleStore
from tests.helpers import MLP

pytestmark = pytest.mark.skipif(importlib.util.find_spec("modelopt") is None,
                                reason="needs nvidia-modelopt (aitune-ray[modelopt])")

FLOAT, FLOAT16 = 1, 10   # onnx.TensorProto element types


def samples_of(module, inputs):
    with torch.no_grad():
        return SampleStore([Sample((x,), {}, module(x), x.shape[0]) for x in inputs], len(inputs))


def run(path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def relative_error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_fp16_autocast_runs_in_onnx_runtime_and_matches_eager(tmp_path):
    import onnx

    module = MLP(32).eval()
    inputs = [torch.randn(bs, 32) for bs in (2, 8)]
    samples = samples_of(module, inputs)
    backend = TensorRTBackend(TensorRTBackendConfig(quantization_config=ONNXAutoCastConfig("fp16")))
    onnx_path, _ = backend.prepare(module, samples, tmp_path)
    assert onnx_path.name == "model_autocast.onnx"
    model = onnx.load(str(onnx_path))
    weights = [i for i in model.graph.initializer if len(i.dims) == 2]
    assert weights and all(i.data_type == FLOAT16 for i in weights)   # the matmuls are fp16 now
    assert model.graph.input[0].type.tensor_type.elem_type == FLOAT    # keep_io_types: fp32 in, fp32 out
    assert sorted(p.name for p in (tmp_path / "onnx" / "model_autocast_calibration").iterdir()) == [
        "sample_0000.npz", "sample_0001.npz"]
    for sample in samples:
        got = run(onnx_path, sample.args[0])
        error = relative_error(got, sample.outputs.numpy())
        assert error < 5e-3              # fp16 tolerance
        assert error > 0                 # and it did compute in fp16: not the fp32 result
    fp32 = run(tmp_path / "onnx" / "model.onnx", inputs[1])
    assert relative_error(fp32, samples.samples[1].outputs.numpy()) < 1e-5


class Amplifier(torch.nn.Module):
    """Values far beyond fp16's range in its first layer, brought back into range by the second."""

    def __init__(self):
        super().__init__()
        self.mlp = MLP(16)

    def forward(self, x):
        return self.mlp(x) * 1e-4


def weight_types(path):
    import onnx

    return {i.data_type for i in onnx.load(str(path)).graph.initializer if len(i.dims) == 2}


def test_recorded_samples_keep_overflowing_nodes_in_fp32(tmp_path):
    torch.manual_seed(0)
    module = Amplifier().eval()
    big = [torch.randn(4, 16) * 3e5]                 # fp16 overflows above 65504
    samples = samples_of(module, big)
    fp32_path = TensorRTBackend().prepare(module, samples, tmp_path / "fp32")[0]
    want = samples.samples[0].outputs.numpy()

    recorded = autocast_onnx(fp32_path, tmp_path / "recorded.onnx", ONNXAutoCastConfig("fp16"), samples)
    assert weight_types(recorded) == {FLOAT}         # the recorded values overflow fp16: the layers stay fp32
    assert relative_error(run(recorded, big[0]), want) < 1e-5

    # what ModelOpt's random reference data in (-1, 1) would have done: everything fp16
    random = autocast_onnx(fp32_path, tmp_path / "random.onnx", ONNXAutoCastConfig("fp16"), None)
    assert weight_types(random) == {FLOAT16}


def test_bf16_autocast_writes_bf16_weights(tmp_path):
    import onnx

    module = MLP(16).eval()
    samples = samples_of(module, [torch.randn(2, 16)])
    path = TensorRTBackend(TensorRTBackendConfig(quantization_config=ONNXAutoCastConfig("bf16"))).prepare(
        module, samples, tmp_path)[0]
    weights = [i for i in onnx.load(str(path)).graph.initializer if len(i.dims) == 2]
    assert weights and all(i.data_type == onnx.TensorProto.BFLOAT16 for i in weights)
