"""The built-in backends on CPU, on one small model (Linear-GELU-Linear, 32 wide), and their configs."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import (Backend, BackendConfig, ONNXExecutionProvider, ONNXRuntimeBackend,
                                ONNXRuntimeBackendConfig, TorchAOBackend, TorchAOBackendConfig, TorchEagerBackend,
                                TorchEagerBackendConfig, TorchInductorAotBackend, TorchInductorAotBackendConfig,
                                TorchInductorJitBackend, TorchInductorJitBackendConfig)
from aitune_ray.errors import BuildError, ConfigError, CorrectnessError
from aitune_ray.measure import compare_outputs
from tests.helpers import FAST_MEASURE, MLP

REPO = Path(__file__).resolve().parent.parent
WIDTH = 32


@pytest.fixture(autouse=True)
def _inline(monkeypatch):
    monkeypatch.setenv("AITUNE_RAY_EXECUTOR", "inline")


def batch(bs: int) -> torch.Tensor:
    return torch.randn(bs, WIDTH, generator=torch.Generator().manual_seed(100 + bs))


def tuned(backend: Backend, batch_sizes=(2, 5), **strategy_options) -> ait.Module:
    """The shared model, wrapped, recorded at batch_sizes and tuned with backend alone. Performance
    validation is off: these tests are about building and running each backend, not its speed here."""
    strategy = ait.OneBackendStrategy(backend, measure_config=FAST_MEASURE, **strategy_options)
    module = ait.Module(MLP(WIDTH), name="mlp", strategy=strategy.enable_performance_validation(False))
    for bs in batch_sizes:
        module(batch(bs))
    module.tune(device="cpu")
    return module


def eager(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return MLP(WIDTH)(x)


def assert_serves(module: ait.Module, backend_type: type, batch_sizes, atol=1e-5):
    assert module.state == ait.ModuleState.TUNED
    assert isinstance(module.backend, backend_type)
    for bs in batch_sizes:
        x = batch(bs)
        out = module(x)
        assert out.shape == (bs, WIDTH)
        torch.testing.assert_close(out, eager(x), rtol=1e-4, atol=atol)


# ----- real backends -----------------------------------------------------------------------------


def test_torch_eager_backend():
    module = tuned(TorchEagerBackend())
    result = module.report.results[0]
    assert result.status == "ok"
    assert result.correctness["max_error"] == 0.0
    assert_serves(module, TorchEagerBackend, (2, 5, 3), atol=0.0)


def test_a_backend_call_records_no_graph_with_gradients_on_or_off():
    module = tuned(TorchEagerBackend())
    x = batch(2)
    with_grad = module(x)                       # gradients on: infer turns them off itself
    with torch.no_grad():
        without = module(x)                     # already off: infer calls the backend directly
    with torch.inference_mode():
        inference = module(x)
    for out in (with_grad, without, inference):
        assert not out.requires_grad and out.grad_fn is None
    assert torch.is_grad_enabled()              # and the caller's mode is as it was
    torch.testing.assert_close(with_grad, without)
    torch.testing.assert_close(without, inference)


@pytest.mark.slow
def test_torch_inductor_jit_backend():
    module = tuned(TorchInductorJitBackend(), batch_sizes=(4, 4))
    result = module.report.results[0]
    assert result.status == "ok"
    assert result.correctness["max_error"] < 1e-4
    assert result.artifacts == {}                   # JIT: the checkpoint keeps a recipe, not an artifact
    assert TorchInductorJitBackend.is_jit
    assert_serves(module, TorchInductorJitBackend, (4,))


@pytest.mark.slow
def test_every_inductor_build_is_compiled_past_dynamo_recompile_limit(tmp_path):
    """A tuner compiles many variants of one module class in one process. Each must get its own compiled
    graph: with torch.compile(module) they share the class's forward in Dynamo's cache, and past its
    recompile limit a further variant silently runs eagerly."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from aitune_ray.model.samples import Sample, SampleStore

    x = batch(3)
    store = SampleStore([Sample((x,), {}, eager(x), 3)])
    with torch._dynamo.config.patch(recompile_limit=2):
        before = counters["stats"]["unique_graphs"]
        for i in range(4):
            backend = TorchInductorJitBackend(TorchInductorJitBackendConfig(options={"max_fusion_size": 60 + i}))
            backend.build(MLP(WIDTH).eval(), store, torch.device("cpu"), tmp_path / str(i))
            torch.testing.assert_close(backend.infer(x), eager(x), rtol=1e-4, atol=1e-5)
        assert counters["stats"]["unique_graphs"] - before == 4


@pytest.mark.slow
def test_torch_inductor_aot_backend_with_dynamic_batch():
    module = tuned(TorchInductorAotBackend(), batch_sizes=(2, 5))
    result = module.report.results[0]
    assert result.status == "ok", result.error
    assert result.correctness["samples_compared"] == 2
    assert sorted(result.timings) == [2, 5]
    assert not TorchInductorAotBackend.is_jit
    assert Path(result.artifacts["model.pt2"]).is_file()
    # One package serves both recorded batch sizes, and one in between that was never recorded.
    assert_serves(module, TorchInductorAotBackend, (2, 5, 3))


def test_onnx_runtime_backend_on_cpu(capfd):
    module = tuned(ONNXRuntimeBackend(), batch_sizes=(2, 5))
    result = module.report.results[0]
    assert result.status == "ok", result.error
    assert result.correctness["max_error"] < 1e-4
    assert Path(result.artifacts["model.onnx"]).is_file()
    assert module.backend._session.get_providers() == [ONNXExecutionProvider.CPU.value]
    # The session took the CPU provider as asked, without ONNX Runtime's error-and-retry fallback.
    assert "EP Error" not in "".join(capfd.readouterr())
    assert_serves(module, ONNXRuntimeBackend, (2, 5, 3))


def test_onnx_runtime_missing_provider_is_a_build_error():
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has the CUDA provider")
    config = ONNXRuntimeBackendConfig(execution_provider=ONNXExecutionProvider.CUDA)
    with pytest.raises(BuildError, match="no CUDAExecutionProvider here") as info:
        tuned(ONNXRuntimeBackend(config), batch_sizes=(2,))
    assert "CPUExecutionProvider" in str(info.value)        # says what is available instead


@pytest.mark.slow
def test_torchao_int8wo_passes_on_its_own_tolerance():
    module = tuned(TorchAOBackend(TorchAOBackendConfig(quantization="int8wo")), batch_sizes=(2, 5))
    result = module.report.results[0]
    assert result.status == "ok", result.error
    assert result.correctness["tolerance"] == TorchAOBackend.default_tolerance == 5e-2
    # Quantization error is real: above the fp32 default of 1e-3, below the backend's own 5e-2.
    assert 1e-3 < result.correctness["max_error"] < 5e-2
    assert module.state == ait.ModuleState.TUNED and isinstance(module.backend, TorchAOBackend)
    x = batch(5)
    out, ref = module(x), eager(x)
    assert not compare_outputs([(out, ref)], tolerance=1e-3).passed
    assert not compare_outputs([(out, ref)]).passed
    assert compare_outputs([(out, ref)], tolerance=TorchAOBackend.default_tolerance).passed


def test_torchao_counts_the_layers_it_quantized_and_fails_where_it_changed_none(tmp_path):
    from aitune_ray.errors import NotApplicableError
    from aitune_ray.model.samples import Sample, SampleStore

    x = torch.randn(2, 4, 8)
    convs = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3, padding=1), torch.nn.GELU(), torch.nn.Conv1d(4, 4, 1))
    store = SampleStore([Sample((x,), {}, convs(x), 2)])
    config = TorchAOBackendConfig(quantization="int8wo", compile=False)
    with pytest.raises(NotApplicableError, match="not applicable: no layer quantized"):
        TorchAOBackend(config).build(convs, store, torch.device("cpu"), tmp_path / "convs")
    mixed = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(32, 8),
                                torch.nn.GELU(), torch.nn.Linear(8, 8))
    store = SampleStore([Sample((x,), {}, mixed(x), 2)])
    backend = TorchAOBackend(config).build(mixed, store, torch.device("cpu"), tmp_path / "mixed")
    state, _ = backend.export()
    assert state == {"quantized_layers": 2, "quantizable_layers": 2}
    from aitune_ray.records.results import BuildResult
    from aitune_ray.report.model import describe_candidate
    assert describe_candidate(BuildResult(key="k", backend="TorchAOBackend", spec={}, status="ok",
                                          state=state)) == "quantized 2 of 2 layers"


def test_a_torchao_build_that_dynamo_cannot_trace_says_compile_false_runs_it(tmp_path, monkeypatch):
    """torch 2.11 with torchao 0.18 on a GPU: Dynamo failed inside torchao's __torch_function__ table lookup.
    The build then fails as a BuildError that names the way out, instead of Dynamo's message alone."""
    from torch._dynamo.exc import InternalTorchDynamoError

    import aitune_ray.backend.torchao_backend as torchao_backend
    from aitune_ray.errors import BuildError
    from aitune_ray.model.samples import Sample, SampleStore

    def untraceable(model, **_):
        def run(*args, **kwargs):
            raise InternalTorchDynamoError("RuntimeError: Polyfill handler <method-wrapper '__eq__'> does not "
                                           "have a traceable function\n\nfrom user code: ...")
        return run

    monkeypatch.setattr(torchao_backend.torch, "compile", untraceable)
    x = torch.randn(2, 8)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8))
    store = SampleStore([Sample((x,), {}, model(x), 2)])
    with pytest.raises(BuildError, match=r"torch.compile could not trace the quantized module "
                                         r"\(InternalTorchDynamoError: RuntimeError: Polyfill handler .*\); "
                                         r"TorchAOBackend with compile=False runs it") as caught:
        TorchAOBackend(TorchAOBackendConfig(quantization="int8wo")).build(model, store, torch.device("cpu"),
                                                                          tmp_path / "w")
    assert "from user code" not in str(caught.value)   # the first line only
    assert isinstance(caught.value.__cause__, InternalTorchDynamoError)


def test_torchao_int8wo_is_rejected_at_a_plain_tolerance():
    backend = TorchAOBackend(TorchAOBackendConfig(quantization="int8wo", compile=False))
    with pytest.raises(CorrectnessError, match=r"exceeds tolerance 0\.001"):
        tuned(backend, batch_sizes=(2,), tolerance={"TorchAOBackend": 1e-3})


# ----- configs -------------------------------------------------------------------------------------


CONFIGS = [
    TorchEagerBackendConfig(),
    TorchEagerBackendConfig(autocast_enabled=True, autocast_dtype="bfloat16"),
    TorchInductorJitBackendConfig(),
    TorchInductorJitBackendConfig(mode="max-autotune", fullgraph=True, dynamic=False),
    TorchInductorJitBackendConfig(options={"max_autotune": True, "epilogue_fusion": False}),
    TorchInductorAotBackendConfig(),
    TorchInductorAotBackendConfig(inductor_configs={"max_autotune": True}, dynamic_batch=False),
    ONNXRuntimeBackendConfig(),
    ONNXRuntimeBackendConfig(use_dynamo=False, execution_provider=ONNXExecutionProvider.CUDA, opset_version=17),
    TorchAOBackendConfig(quantization="fp8wo"),
    TorchAOBackendConfig(quantization="int8dq", compile=False, mode="max-autotune", dynamic=True),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{type(c).__name__}:{c.describe() or 'default'}")
def test_config_round_trip_and_stable_key(config):
    data = config.to_dict()
    assert json.loads(json.dumps(data)) == data             # plain JSON values only
    again = type(config).from_dict(json.loads(json.dumps(data)))
    assert again == config
    assert again.key() == config.key()
    assert len(config.key()) == 12
    assert config.key() == config.key()


def test_config_keys_differ_between_configs():
    keys = [c.key() for c in CONFIGS]
    assert len(set(keys)) == len(keys)
    # Same values in another config class: another key.
    assert TorchInductorJitBackendConfig().key() != TorchAOBackendConfig(quantization="int8wo").key()


def test_config_keys_are_stable_across_processes():
    script = textwrap.dedent("""
        import json
        from tests.test_backends import CONFIGS
        print(json.dumps([c.key() for c in CONFIGS]))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [c.key() for c in CONFIGS]


@pytest.mark.parametrize("cls", [TorchEagerBackendConfig, TorchInductorJitBackendConfig,
                                 TorchInductorAotBackendConfig, ONNXRuntimeBackendConfig, TorchAOBackendConfig])
def test_config_from_dict_rejects_an_unknown_key(cls):
    data = (cls(quantization="int8wo") if cls is TorchAOBackendConfig else cls()).to_dict()
    data["no_such_option"] = 1
    with pytest.raises(ConfigError, match="no_such_option"):
        cls.from_dict(data)


@pytest.mark.parametrize("make", [
    lambda: TorchInductorJitBackendConfig(mode="fastest"),
    lambda: TorchInductorJitBackendConfig(mode="default", options={"max_autotune": True}),
    lambda: TorchAOBackendConfig(quantization="int3"),
    lambda: TorchAOBackendConfig(quantization=None),
])
def test_invalid_config_values_are_config_errors(make):
    with pytest.raises(ConfigError):
        make()


def test_backend_spec_recreates_the_backend():
    for backend in (TorchInductorJitBackend(TorchInductorJitBackendConfig(dynamic=True)),
                    ONNXRuntimeBackend(ONNXRuntimeBackendConfig(opset_version=18)),
                    TorchAOBackend(TorchAOBackendConfig(quantization="int8dq"))):
        again = Backend.from_spec(json.loads(json.dumps(backend.spec())))
        assert type(again) is type(backend)
        assert again.config == backend.config
        assert again.key() == backend.key()


def test_backend_rejects_a_config_of_another_backend():
    with pytest.raises(ConfigError, match="TorchInductorJitBackendConfig"):
        TorchInductorJitBackend(ONNXRuntimeBackendConfig())


def test_base_config_has_no_fields():
    assert BackendConfig().to_dict() == {}


# ----- imports ---------------------------------------------------------------------------------------


def test_import_does_not_pull_optional_libraries():
    script = textwrap.dedent("""
        import json, sys
        import aitune_ray
        import aitune_ray.backend, aitune_ray.tune_strategy, aitune_ray.measure
        print(json.dumps(sorted(m for m in ("ray", "onnxruntime", "torchao", "onnx", "tensorrt")
                                if m in sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_graph_replaying_modes_hand_each_caller_outputs_of_its_own():
    from aitune_ray.backend.cudagraph_outputs import call_owned, captures_graphs

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert captures_graphs(cuda, "max-autotune") and captures_graphs(cuda, "reduce-overhead")
    assert captures_graphs(cuda, None, {"triton.cudagraphs": True})
    assert not captures_graphs(cuda, "max-autotune-no-cudagraphs") and not captures_graphs(cuda, "default")
    assert not captures_graphs(cpu, "max-autotune") and not captures_graphs(None, "reduce-overhead")
    kept = torch.ones(3)
    out = call_owned(lambda x: {"y": kept, "n": 2}, None)
    assert torch.equal(out["y"], kept) and out["y"].data_ptr() != kept.data_ptr() and out["n"] == 2
