"""ONNXRuntimeBackend on the CUDA EP (onnxruntime-gpu): IO binding, streams, CUDA graphs, checkpoints.

Needs a CUDA GPU and an ONNX Runtime with the CUDA EP; without the EP the first test fails (so that a
run without it is not read as a pass) and the others skip.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_ray.errors import BuildError, InputMismatchError
from aitune_ray.measure import compare_outputs
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.model.samples import Sample, SampleStore

pytestmark = pytest.mark.gpu
ort = pytest.importorskip("onnxruntime")
HAS_CUDA_EP = "CUDAExecutionProvider" in ort.get_available_providers()
needs_cuda_ep = pytest.mark.skipif(not HAS_CUDA_EP, reason="this ONNX Runtime has no CUDA EP")
CUDA = torch.device("cuda")
WIDTH = 512
FAST = MeasureConfig(warmup_runs=2, min_runs=5, max_runs=20, max_seconds=0.3)


def block(dtype, width=WIDTH) -> nn.Module:
    """Linear, GELU, Linear, LayerNorm, with a residual: enough GPU work per call for a race to show."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down, self.norm = nn.Linear(width, 4 * width), nn.Linear(4 * width, width), nn.LayerNorm(width)

        def forward(self, x):
            return self.norm(x + self.down(nn.functional.gelu(self.up(x))))

    torch.manual_seed(0)
    return Block().eval().to(CUDA, dtype)


def build(model, batch_sizes, dtype, tmp_path, **config) -> ONNXRuntimeBackend:
    samples = []
    for bs in batch_sizes:
        x = torch.randn(bs, 64, WIDTH, device=CUDA, dtype=dtype)
        with torch.no_grad():
            samples.append(Sample((x,), {}, model(x), bs))
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(**config))
    return backend.build(model, SampleStore(samples), CUDA, tmp_path)


def assert_matches(out, ref):
    report = compare_outputs([(out, ref)])
    assert report.passed, report


def test_onnxruntime_here_has_the_cuda_ep():
    assert HAS_CUDA_EP, f"ONNX Runtime {ort.__version__} has only {ort.get_available_providers()}"


@needs_cuda_ep
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_ep_matches_eager(dtype, tmp_path):
    model = block(dtype)
    backend = build(model, (4, 16), dtype, tmp_path)
    assert backend._session.get_providers()[0] == "CUDAExecutionProvider"
    assert backend._bound.ordered_by == "events"           # ONNX Runtime took the backend's stream
    for bs in (4, 16, 9):
        x = torch.randn(bs, 64, WIDTH, device=CUDA, dtype=dtype)
        out = backend.infer(x)
        assert out.device.type == "cuda" and out.dtype == dtype
        with torch.no_grad():
            assert_matches(out, model(x))
    with pytest.raises(InputMismatchError, match="is on cpu"):
        backend.infer(torch.randn(4, 64, WIDTH, dtype=dtype))


@needs_cuda_ep
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_a_thousand_back_to_back_calls_with_changing_inputs(cuda_graphs, tmp_path):
    """One input buffer rewritten in place before each call, outputs kept and checked after one final
    synchronize: ONNX Runtime reading the buffer late, or writing an output after it was handed over, shows
    up as an output that belongs to another call."""
    dtype, bs, calls = torch.float16, 8, 1000
    model = block(dtype)
    backend = build(model, (bs,), dtype, tmp_path, use_cuda_graphs=cuda_graphs)
    base = torch.randn(bs, 64, WIDTH, device=CUDA, dtype=dtype)
    scales = torch.linspace(0.5, 2.0, calls, device=CUDA, dtype=dtype)
    buffer = torch.empty_like(base)
    outputs = []
    for i in range(calls):
        buffer.copy_(base * scales[i])
        outputs.append(backend.infer(buffer))
    torch.cuda.synchronize()
    with torch.no_grad():
        for i, out in enumerate(outputs):
            report = compare_outputs([(out, model(base * scales[i]))])
            assert report.passed, f"call {i}: {report}"
    if cuda_graphs:
        assert backend._bound.graphs_captured == [bs]


@needs_cuda_ep
def test_cuda_graphs_per_batch_size_and_an_uncaptured_off_size(tmp_path):
    dtype = torch.float16
    model = block(dtype)
    backend = build(model, (4, 16), dtype, tmp_path, use_cuda_graphs=True)
    assert backend._bound.graphs_captured == [4, 16]        # captured at the build
    for bs in (4, 7, 16, 7, 4):
        x = torch.randn(bs, 64, WIDTH, device=CUDA, dtype=dtype)
        with torch.no_grad():
            assert_matches(backend.infer(x), model(x))
    assert backend._bound.graphs_captured == [4, 16]        # 7 ran uncaptured
    assert all(g.runs >= 3 for g in backend._bound._graphs.values())


@needs_cuda_ep
def test_checkpoint_save_load_run_recaptures_at_first_use(tmp_path):
    dtype = torch.float16
    model = block(dtype)
    config = ONNXRuntimeBackendConfig(use_cuda_graphs=True, provider_options={"cuda": {"use_tf32": False}})
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(config), measure_config=FAST)
    strategy.enable_performance_validation(False)
    wrapped = ait.Module(model, "block", strategy=strategy)
    data = [torch.randn(bs, 64, WIDTH, device=CUDA, dtype=dtype) for bs in (4, 16)]
    ait.tune(wrapped, data, device="cuda", executor=ait.InlineExecutor(), call_as_given=True)
    assert isinstance(wrapped.backend, ONNXRuntimeBackend), wrapped.report
    ait.save(wrapped, tmp_path / "block.ait")
    fresh = ait.Module(block(dtype), "block")
    loaded = ait.load(fresh, tmp_path / "block.ait")
    backend = loaded.backend
    assert isinstance(backend, ONNXRuntimeBackend) and backend.config == config
    assert backend._bound.graphs_captured == []
    x = torch.randn(16, 64, WIDTH, device=CUDA, dtype=dtype)
    with torch.no_grad():
        ref = model(x)
    for _ in range(3):                                     # warm-up, capture, replay
        assert_matches(loaded(x), ref)
    assert backend._bound.graphs_captured == [16]


class Branchy(nn.Module):
    """Control flow (an ONNX If), which ONNX Runtime cannot capture in a CUDA graph."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.linear(t) * 2, lambda t: self.linear(t) - 1, (x,))


@needs_cuda_ep
def test_a_model_that_cannot_be_captured_is_a_build_error(tmp_path):
    model = Branchy().eval().to(CUDA)
    with pytest.raises(BuildError, match="CUDA graph"):
        build(model, (4,), torch.float32, tmp_path / "graphs", use_cuda_graphs=True)
    backend = build(model, (4,), torch.float32, tmp_path / "plain")     # uncaptured, the same model runs
    x = torch.randn(4, 64, WIDTH, device=CUDA)
    with torch.no_grad():
        assert_matches(backend.infer(x), model(x))
