"""GPU-only paths: each backend on a real CUDA device. Skipped without CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import (
    ONNXExecutionProvider,
    ONNXRuntimeBackend,
    ONNXRuntimeBackendConfig,
    TorchAOBackend,
    TorchAOBackendConfig,
    TorchInductorJitBackend,
)
from aitune_ray.errors import BuildError
from aitune_ray.measure.timing import MeasureConfig

pytestmark = pytest.mark.gpu

FAST = MeasureConfig(warmup_runs=3, min_runs=10, max_runs=100, max_seconds=0.5)


def mlp(width: int = 1024, depth: int = 4, dtype=torch.bfloat16) -> nn.Module:
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers).eval().to("cuda", dtype)


def tuned(model: nn.Module, backend, batches=(8, 256), width: int = 1024, dtype=torch.bfloat16):
    strategy = ait.OneBackendStrategy(backend, measure_config=FAST).enable_performance_validation(False)
    wrapped = ait.Module(model, "m", strategy=strategy)
    data = [torch.randn(bs, width, device="cuda", dtype=dtype) for bs in batches]
    report = ait.tune(wrapped, data, device="cuda", executor=ait.InlineExecutor(), call_as_given=True)
    return wrapped, report, data


def test_inductor_jit_on_gpu_matches_eager_and_reports_throughput():
    model = mlp()
    wrapped, report, data = tuned(model, TorchInductorJitBackend())
    result = report.modules[0].results[0]
    assert result.status == "ok", result.error
    assert "H200" in result.gpu or "cuda" in result.device
    assert set(result.timings) == {8, 256}
    with torch.no_grad():
        torch.testing.assert_close(wrapped(data[1]), model(data[1]), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("quantization", ["int8wo", "int8dq", "fp8wo"])
def test_torchao_on_gpu_within_its_tolerance(quantization):
    pytest.importorskip("torchao")
    # int8 dynamic quantization runs torch._int_mm, which needs more than 16 rows
    wrapped, report, _ = tuned(mlp(), TorchAOBackend(TorchAOBackendConfig(quantization=quantization)),
                               batches=(32, 256))
    result = report.modules[0].results[0]
    assert result.status == "ok", result.error
    assert 0 < result.correctness["max_error"] <= TorchAOBackend.default_tolerance


def test_onnxruntime_cuda_provider_never_falls_back_to_cpu():
    import onnxruntime as ort

    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(execution_provider=ONNXExecutionProvider.CUDA))
    model = mlp(dtype=torch.float32)
    if "CUDAExecutionProvider" in ort.get_available_providers():
        wrapped, report, _ = tuned(model, backend, dtype=torch.float32)
        assert report.modules[0].results[0].status == "ok"
    else:  # tune() keeps a failed module eager and reports why; Module.tune() raises the backend's error
        _, report, _ = tuned(model, backend, dtype=torch.float32)
        assert "CUDAExecutionProvider" in report.failures["m"]
        assert report.modules[0].results[0].status == "error"
        wrapped = ait.Module(model, "m2", strategy=ait.OneBackendStrategy(backend))
        wrapped(torch.randn(4, 1024, device="cuda"))
        with pytest.raises(BuildError, match="CUDAExecutionProvider"):
            wrapped.tune(device="cuda", executor=ait.InlineExecutor())


def test_aot_inductor_build_in_a_child_process_reports_its_fate():
    """The AOTInductor package load is known to crash some torch builds: run it where a crash is contained."""
    script = textwrap.dedent("""
        import torch, aitune_ray as ait
        from torch import nn
        from aitune_ray.backend import TorchInductorAotBackend
        from aitune_ray.measure.timing import MeasureConfig
        m = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256)).eval().cuda()
        s = ait.OneBackendStrategy(TorchInductorAotBackend(), measure_config=MeasureConfig(max_seconds=0.3))
        w = ait.Module(m, "m", strategy=s.enable_performance_validation(False))
        ait.tune(w, [torch.randn(4, 256, device="cuda"), torch.randn(16, 256, device="cuda")],
                 device="cuda", executor=ait.InlineExecutor(), call_as_given=True)
        print("AOT_STATUS", w.report.results[0].status)
    """)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], capture_output=True, text=True,
                          timeout=580, env={**os.environ, "PYTHONPATH": os.getcwd()})
    if proc.returncode < 0:
        pytest.xfail(f"AOTInductor killed its process with signal {-proc.returncode}: {proc.stderr[-400:]}")
    assert "AOT_STATUS ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_max_throughput_on_gpu_never_slower_than_eager_at_a_recorded_batch_size():
    model = mlp(width=2048)
    strategy = ait.MaxThroughputStrategy([TorchInductorJitBackend(),
                                          TorchInductorJitBackend(
                                              ait.backend.TorchInductorJitBackendConfig(mode="max-autotune-no-cudagraphs"))],
                                         measure_config=FAST)
    wrapped = ait.Module(model, "m", strategy=strategy)
    data = [torch.randn(bs, 2048, device="cuda", dtype=torch.bfloat16) for bs in (4, 4, 512)]
    report = ait.tune(wrapped, data, device="cuda", executor=ait.InlineExecutor(), call_as_given=True)
    mod = report.modules[0]
    assert {r.status for r in mod.results} == {"ok"}
    if mod.chosen is not None:   # accepted on the confirm session's paired rounds
        assert wrapped.state == ait.ModuleState.TUNED
        verdict = mod.verdicts[mod.chosen]
        assert verdict["verdict"] == "faster" and verdict["interval"]["paired"]
        assert verdict["interval"]["low"] >= 1.01
        assert all(i["low"] >= 0.97 for i in verdict["intervals"].values())   # non-inferior at every size
        assert mod.deploy_checks and mod.deploy_checks[-1]["verdict"] != "slower at a batch size"
    else:  # eager kept: then no candidate was shown faster, and the report says which way each went
        assert wrapped.backend is None
        for r in mod.results:   # a candidate left out at screening has no verdict of the confirm session
            verdict = mod.verdicts.get(r.key, {}).get("verdict")
            assert verdict != "faster" or mod.deploy_checks, mod.notes.get(r.key)


def test_a_timed_burst_waits_for_work_queued_on_other_streams():
    # ONNX Runtime and TensorRT run on streams of their own: a device-wide synchronize must wait for them.
    from aitune_ray.measure import timing

    side = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")

    def on_side_stream():
        with torch.cuda.stream(side):
            for _ in range(4):
                a @ a

    on_side_stream()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(side)
    on_side_stream()
    end.record(side)
    torch.cuda.synchronize()
    kernel_ms = start.elapsed_time(end)
    assert timing._time_once(on_side_stream, torch.device("cuda"), 3) >= 0.8 * kernel_ms


def test_the_warm_up_on_its_own_thread_compiles_and_leaves_the_task_thread_set_up():
    """The whole default warm-up, on its thread, on the GPU: every step runs, none fails, and a compile on
    the task thread afterwards uses the warm-up's thread count."""
    from aitune_ray.runtime.warm_up import WarmUp
    from tests.helpers import thread_settings

    with thread_settings() as inductor_config:
        warm = WarmUp(4, "compile")
        warm.start()
        assert warm.wait(300)
        seconds = warm.stop()
        assert {"compile_pool_start_s", "cuda_context_s", "first_compile_s", "torchao_import_s"} <= set(seconds)
        assert "skipped" not in seconds
        assert inductor_config.compile_threads == 4 and torch.get_num_threads() == 4
        compiled = torch.compile(lambda x: torch.relu(x) + 1.0)
        x = torch.randn(32, 32, device="cuda")
        torch.testing.assert_close(compiled(x), torch.relu(x) + 1.0)
