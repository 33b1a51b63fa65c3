"""Torch-TensorRT JIT and AOT on the CPU: configs and the explicit-typing rule, settings for the installed
torch-tensorrt, the AOT export step, missing torch-tensorrt, and the KernelSelector composites' rules."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import types

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import (Backend, KernelSelectorBackend, KernelSelectorBackendConfig, TorchEagerBackend,
                                TorchTensorRTAotBackend, TorchTensorRTAotBackendConfig, TorchTensorRTConfig,
                                TorchTensorRTJitBackend, TorchTensorRTJitBackendConfig)
from aitune_ray.backend.torch_tensorrt_aot import export_program
from aitune_ray.errors import BuildError, CheckpointError, ConfigError, MissingDependencyError
from aitune_ray.kernel_forge import SageAttentionKernelProvider, TorchSDPAKernelProvider
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.model.samples import Sample, SampleStore
from tests.helpers import FAST_MEASURE, MLP

HAS_TORCH_TENSORRT = importlib.util.find_spec("torch_tensorrt") is not None
without_torch_tensorrt = pytest.mark.skipif(HAS_TORCH_TENSORRT, reason="torch-tensorrt is installed here")


def settings_class(*names):
    """A stand-in for torch_tensorrt.dynamo.CompilationSettings with the given field names."""
    cls = dataclasses.make_dataclass("CompilationSettings", [(n, object, None) for n in names])
    return types.SimpleNamespace(dynamo=types.SimpleNamespace(CompilationSettings=cls), __version__="stand-in")


COMMON = ("workspace_size", "min_block_size", "torch_executed_ops", "optimization_level", "truncate_double",
          "device", "require_full_compilation", "disable_tf32", "timing_cache_path", "enable_autocast",
          "autocast_low_precision_type")
V2_11 = settings_class("enabled_precisions", "use_explicit_typing", *COMMON)   # 2.11 and 2.12 have both
V2_13 = settings_class(*COMMON)                                                   # 2.13 (TensorRT 11): neither


# ----- configs -------------------------------------------------------------------------------------

def test_configs_round_trip_with_the_nested_compile_config():
    compile_config = TorchTensorRTConfig(enabled_precisions=[torch.float16, "float32"], use_explicit_typing=False,
                                         min_block_size=3, workspace_size=1 << 30, torch_executed_ops=["aten.gelu"],
                                         options={"cache_built_engines": True})
    for cls, backend_cls in ((TorchTensorRTJitBackendConfig, TorchTensorRTJitBackend),
                             (TorchTensorRTAotBackendConfig, TorchTensorRTAotBackend)):
        config = cls(compile_config=compile_config)
        data = json.loads(json.dumps(config.to_dict()))
        assert data["compile_config"]["enabled_precisions"] == ["float16", "float32"]
        again = cls.from_dict(data)
        assert again == config and again.key() == config.key()
        assert again.key() != cls().key()
        backend = backend_cls(config)
        assert Backend.from_spec(json.loads(json.dumps(backend.spec()))).key() == backend.key()
        assert "min_block_size" in backend.describe()


@pytest.mark.parametrize("fields, words", [
    ({"enabled_precisions": ["float16"], "use_explicit_typing": True}, "use_explicit_typing=True"),   # 2.11's rule
    ({"enabled_precisions": ["float64"], "use_explicit_typing": False}, "is not one of"),
    ({"enabled_precisions": []}, "at least one"),
    ({"min_block_size": 0}, "positive"),
    ({"workspace_size": -1}, "non-negative"),
    ({"optimization_level": 6}, "between 0 and 5"),
    ({"options": {"min_block_size": 1}}, "set them directly"),
])
def test_compile_config_rejects_bad_values(fields, words):
    with pytest.raises(ConfigError, match=words):
        TorchTensorRTConfig.from_dict(fields)


def test_jit_config_rejects_a_compile_config_of_another_type():
    with pytest.raises(ConfigError, match="compile_config"):
        TorchTensorRTJitBackendConfig(compile_config="fp16")


# ----- settings for the installed torch-tensorrt ------------------------------------------------------

def test_settings_for_torch_tensorrt_2_11():
    weak = TorchTensorRTConfig(enabled_precisions=["float16", "float32"], use_explicit_typing=False)
    settings = weak.settings(V2_11)
    assert settings["enabled_precisions"] == {torch.float16, torch.float32}
    assert settings["use_explicit_typing"] is False and settings["min_block_size"] == 5
    assert "timing_cache_path" not in settings          # torch-tensorrt's own default then
    assert TorchTensorRTConfig(timing_cache_path="/shared/t.bin").settings(V2_11)["timing_cache_path"] == "/shared/t.bin"
    assert weak.settings(V2_11, min_block_size=1)["min_block_size"] == 1


def test_settings_for_torch_tensorrt_2_13_drop_defaults_and_refuse_weak_typing():
    settings = TorchTensorRTConfig().settings(V2_13)
    assert "enabled_precisions" not in settings and "use_explicit_typing" not in settings
    autocast = TorchTensorRTConfig(options={"enable_autocast": True, "autocast_low_precision_type": torch.float16})
    assert autocast.settings(V2_13)["enable_autocast"] is True
    weak = TorchTensorRTConfig(enabled_precisions=["float16"], use_explicit_typing=False)
    with pytest.raises(BuildError, match="has no setting enabled_precisions, use_explicit_typing.*enable_autocast"):
        weak.settings(V2_13)
    with pytest.raises(BuildError, match="no setting no_such_option"):
        TorchTensorRTConfig(options={"no_such_option": 1}).settings(V2_13)


# ----- the AOT export step --------------------------------------------------------------------------

class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP(8)

    def forward(self, x, mask):
        return self.mlp(x) * mask


def test_aot_export_shares_one_dim_per_recorded_range_and_runs_within_it():
    module = TwoInputs().eval()
    samples = []
    for bs in (2, 8):
        x, mask = torch.randn(bs, 8), torch.ones(bs, 8)
        samples.append(Sample((x,), {"mask": mask}, module(x, mask), bs))
    program, profile, flat = export_program(module, SampleStore(samples))
    assert flat.sample.batch_size == 8
    assert profile.shapes["input_0"] == ((2, 8), (8, 8), (8, 8))   # opt: the larger batch on a tie
    ranges = {(int(r.lower), int(r.upper)) for r in program.range_constraints.values()}
    assert ranges == {(2, 8)}                                     # one symbol for both inputs' batch
    x, mask = torch.randn(5, 8), torch.ones(5, 8)
    torch.testing.assert_close(program.module()(x, mask), (module(x, mask),))   # tensors in, tensors out


# ----- without torch-tensorrt ---------------------------------------------------------------------------

@without_torch_tensorrt
@pytest.mark.parametrize("backend_class", [TorchTensorRTJitBackend, TorchTensorRTAotBackend])
def test_building_without_torch_tensorrt_names_the_extra(tmp_path, backend_class):
    module = MLP(8).eval()
    samples = SampleStore([Sample((torch.randn(2, 8),), {}, None, 2)])
    with pytest.raises(MissingDependencyError, match=r"aitune-ray\[torch-tensorrt\]"):
        backend_class().build(module, samples, torch.device("cpu"), tmp_path)


@without_torch_tensorrt
def test_strategies_without_torch_tensorrt():
    def recorded(strategy):
        module = ait.Module(MLP(16), "mlp", strategy=strategy)
        module(torch.randn(4, 16))
        return module

    strategy = ait.FirstWinsStrategy([TorchTensorRTAotBackend(), TorchTensorRTJitBackend(), TorchEagerBackend()],
                                     measure_config=FAST_MEASURE)
    strategy.enable_performance_validation(False)
    report = recorded(strategy).tune(device="cpu")
    assert report.chosen == TorchEagerBackend().key()
    assert sum("aitune-ray[torch-tensorrt]" in (r.error or "") for r in report.results) == 2
    with pytest.raises(MissingDependencyError, match="torch-tensorrt"):
        recorded(ait.OneBackendStrategy(TorchTensorRTJitBackend(), measure_config=FAST_MEASURE)).tune(device="cpu")


# ----- KernelSelector composites ----------------------------------------------------------------------

class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def attention_samples():
    q = torch.randn(1, 2, 4, 8)
    return SampleStore([Sample((q, q, q), {}, Attention()(q, q, q), 1)])


def sage_plan():
    return KernelOptimizationPlan((SageAttentionKernelProvider.from_dict({"type": "SageAttentionKernelProvider"}),))


def composite(delegate, plan):
    backend = KernelSelectorBackend(KernelSelectorBackendConfig(kernel_providers=[SageAttentionKernelProvider()]),
                                    delegate)
    # as an executor hands over a plan made elsewhere: through the spec
    return Backend.from_spec(KernelSelectorBackend.spec_with_plan(backend.spec(), plan))


def test_torch_tensorrt_aot_with_sage_attention_is_refused_before_anything_is_built(tmp_path):
    backend = composite(TorchTensorRTAotBackend(), sage_plan())
    with pytest.raises(ConfigError, match="SageAttention.*TorchTensorRTJitBackend"):
        backend.build(Attention(), attention_samples(), torch.device("cpu"), tmp_path)
    assert not any(tmp_path.rglob("*"))   # not attempted: no export, no delegate folder


def test_torch_tensorrt_aot_accepts_plans_without_sage_attention():
    TorchTensorRTAotBackend().check_kernel_plan(KernelOptimizationPlan())
    sdpa = TorchSDPAKernelProvider.from_dict({"type": "TorchSDPAKernelProvider", "backend": "flash"})
    TorchTensorRTAotBackend().check_kernel_plan(KernelOptimizationPlan((sdpa,)))


def test_torch_tensorrt_jit_with_sage_attention_compiles_with_min_block_size_one(tmp_path, monkeypatch):
    library = types.SimpleNamespace(sageattn=lambda q, k, v, **options: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    monkeypatch.setattr(SageAttentionKernelProvider, "_library", lambda self: library)   # no GPU library here
    delegate = TorchTensorRTJitBackend()
    assert delegate.compile_options(V2_11, torch.device("cuda"))["min_block_size"] == 5
    backend = composite(delegate, sage_plan())
    if HAS_TORCH_TENSORRT:
        pytest.skip("the build itself is a GPU test where torch-tensorrt is installed")
    with pytest.raises(MissingDependencyError):   # the rule is applied, then the build needs torch-tensorrt
        backend.build(Attention(), attention_samples(), torch.device("cpu"), tmp_path)
    assert backend.delegate.compile_options(V2_11, torch.device("cuda"))["min_block_size"] == 1
    # a checkpoint restore rebuilds the JIT delegate: the rule holds there too
    restored = composite(TorchTensorRTJitBackend(), KernelOptimizationPlan())
    state = {"version": 1, "kernel_plan": sage_plan().to_dict(), "delegate_state": {}}
    with pytest.raises(MissingDependencyError):
        restored.restore(Attention(), state, {}, torch.device("cpu"), tmp_path / "restore")
    assert restored.delegate.compile_options(V2_13, torch.device("cuda"))["min_block_size"] == 1


# ----- extras ---------------------------------------------------------------------------------------

def test_extras_admit_the_torch_tensorrt_release_of_each_supported_torch_and_its_tensorrt():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    specs = {r.name: r.specifier for r in map(Requirement, extras["torch-tensorrt"] + extras["tensorrt"])}
    # each torch-tensorrt release pins one torch minor version and a TensorRT range (their wheels' metadata):
    # 2.11.0 -> torch 2.11, tensorrt-cu13 10.15.x; 2.12.1 -> torch 2.12, 10.16.x; 2.13.0 -> torch 2.13, 11.0.x
    for release, tensorrt in (("2.11.0", "10.15.1.29"), ("2.12.1", "10.16.1.11"), ("2.13.0", "11.0.0.114")):
        assert release in specs["torch-tensorrt"] and tensorrt in specs["tensorrt-cu13"]
    assert "2.14.0" not in specs["torch-tensorrt"]   # pairs with a torch this project does not admit


def test_the_aot_artifact_counts_as_code_that_runs_as_it_loads(tmp_path):
    from aitune_ray.backend import TorchTensorRTAotBackend
    from aitune_ray.checkpoint.artifact_check import check_artifacts

    artifact = tmp_path / "model.ep"
    artifact.write_bytes(b"PK\x05\x06" + b"\x00" * 18)   # any bytes: torch.export.load would unpickle what is inside
    with pytest.raises(CheckpointError, match="'model.ep' is code that runs as it loads"):
        check_artifacts("m", TorchTensorRTAotBackend(), {"model.ep": artifact}, trusted=False)
    check_artifacts("m", TorchTensorRTAotBackend(), {"model.ep": artifact}, trusted=True)
