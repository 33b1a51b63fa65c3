"""TensorRTBackend on the CPU: config, profiles from recorded shapes, the ONNX step, missing TensorRT, strategies,
and the checkpoint layout. Tests marked tensorrt need TensorRT's libraries and a GPU (skipped otherwise)."""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import (ONNXAutoCastConfig, ProfileMode, TensorRTBackend, TensorRTBackendConfig,
                                TensorRTProfile, TorchEagerBackend)
from aitune_ray.backend.tensorrt_profiles import (derive_profiles, dynamic_axes, for_inputs, load_profiles,
                                                  recorded_shapes, select_profile)
from aitune_ray.errors import CheckpointError, ConfigError, MissingDependencyError
from aitune_ray.model.samples import Sample, SampleStore
from tests.helpers import FAST_MEASURE, MLP

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
needs_tensorrt = pytest.mark.skipif(not (HAS_TENSORRT and torch.cuda.is_available()),
                                    reason="needs TensorRT's libraries and a CUDA GPU")


def store(*shapes_per_call, extra=None) -> SampleStore:
    """Samples of a two-input call: x of the given shape, mask of (batch, shape[1])."""
    samples = []
    for shape in shapes_per_call:
        x = torch.randn(*shape)
        mask = torch.ones(shape[0], shape[1])
        samples.append(Sample((x,), {"mask": mask}, x, shape[0]))
    return SampleStore(samples, len(samples))


# ----- config -----------------------------------------------------------------------------------

def test_config_round_trips_through_to_dict_and_keys_differ_by_value():
    config = TensorRTBackendConfig(workspace_size=1 << 30, optimization_level=5, timing_cache="/shared/trt.cache",
                                   profiles=[TensorRTProfile({"input_0": ([1, 8], [4, 8], [16, 8])})],
                                   quantization_config=ONNXAutoCastConfig(precision="bf16"), use_cuda_graphs=False)
    data = json.loads(json.dumps(config.to_dict()))
    assert data["quantization_config"]["_type"] == "ONNXAutoCastConfig"
    assert data["profiles"] == [{"input_0": [[1, 8], [4, 8], [16, 8]]}]
    again = TensorRTBackendConfig.from_dict(data)
    assert again == config and again.key() == config.key()
    assert again.quantization_config.precision == "bf16"
    assert TensorRTBackendConfig(profiles="samples_used").profiles is ProfileMode.SAMPLES_USED
    assert TensorRTBackendConfig().key() != TensorRTBackendConfig(enable_tf32=False).key()
    backend = TensorRTBackend(config)
    assert ait.backend.Backend.from_spec(json.loads(json.dumps(backend.spec()))).key() == backend.key()


@pytest.mark.parametrize("fields, words", [
    ({"profiles": "every"}, "profiles must be one of"),
    ({"profiles": []}, "empty list"),
    ({"profiles": [{"input_0": ([4], [2], [8])}]}, "min <= opt <= max"),
    ({"optimization_level": 7}, "between 0 and 5"),
    ({"workspace_size": -1}, "non-negative"),
    ({"compatibility_level": "any"}, "compatibility_level"),
    ({"max_cuda_graphs": 0}, "positive"),
    ({"quantization_config": {"_type": "INT8Config"}}, "is not one of"),
    ({"quantization_config": "fp16"}, "takes an ONNXAutoCastConfig"),
    ({"no_such_field": 1}, "has no field"),
])
def test_config_rejects_bad_values(fields, words):
    with pytest.raises(ConfigError, match=words):
        TensorRTBackendConfig.from_dict(fields)


def test_autocast_config_validates_precision():
    assert ONNXAutoCastConfig.from_dict(ONNXAutoCastConfig("bf16").to_dict()).precision == "bf16"
    with pytest.raises(ConfigError, match="precision"):
        ONNXAutoCastConfig(precision="int8")


# ----- profiles from recorded shapes --------------------------------------------------------------

def test_single_profile_spans_the_recorded_range_with_opt_at_the_most_frequent_call():
    samples = store((2, 8), (8, 8), (8, 8), (32, 8))
    [profile] = derive_profiles(samples, ProfileMode.SINGLE)
    assert profile.shapes == {"input_0": ((2, 8), (8, 8), (32, 8)), "input_1": ((2, 8), (8, 8), (32, 8))}
    assert not profile.is_static
    # both inputs share their batch axis: one symbol, and the fixed axis stays static
    assert dynamic_axes([profile]) == {"input_0": {0: "dim_0"}, "input_1": {0: "dim_0"}}


def test_opt_ties_go_to_the_larger_batch_and_other_axes_vary_too():
    samples = store((2, 16), (4, 8))
    [profile] = derive_profiles(samples, "single")
    assert profile.shapes["input_0"] == ((2, 8), (4, 8), (4, 16))
    assert dynamic_axes([profile]) == {"input_0": {0: "dim_0", 1: "dim_1"}, "input_1": {0: "dim_0", 1: "dim_1"}}


def test_samples_used_gives_one_static_profile_per_recorded_batch_size_in_order():
    samples = store((8, 8), (1, 8), (8, 8), (4, 8))
    profiles = derive_profiles(samples, ProfileMode.SAMPLES_USED)
    assert [p.shapes["input_0"][0] for p in profiles] == [(1, 8), (4, 8), (8, 8)]
    assert all(p.is_static for p in profiles)
    # one engine holds all three: its ONNX model needs the batch axis dynamic
    assert dynamic_axes(profiles) == {"input_0": {0: "dim_0"}, "input_1": {0: "dim_0"}}
    assert select_profile(profiles, {"input_0": (4, 8), "input_1": (4, 8)}) == 1
    with pytest.raises(ConfigError, match="no TensorRT optimization profile admits"):
        select_profile(profiles, {"input_0": (2, 8), "input_1": (2, 8)})


def test_one_recorded_shape_gives_a_static_profile_and_no_dynamic_axis():
    [profile] = derive_profiles(store((4, 8), (4, 8)), ProfileMode.SINGLE)
    assert profile.is_static and dynamic_axes([profile]) == {}


def test_given_profiles_are_checked_against_the_recorded_inputs():
    samples = store((2, 8), (8, 8))
    good = TensorRTProfile({"input_0": ((1, 8), (8, 8), (16, 8)), "input_1": ((1, 8), (8, 8), (16, 8))})
    assert derive_profiles(samples, [good]) == [good]
    with pytest.raises(ConfigError, match="do not match the recorded tensor inputs"):
        derive_profiles(samples, [TensorRTProfile({"input_0": ((1, 8), (8, 8), (16, 8))})])
    narrow = TensorRTProfile({"input_0": ((1, 8), (2, 8), (4, 8)), "input_1": ((1, 8), (2, 8), (4, 8))})
    with pytest.raises(ConfigError, match="admits the recorded input shapes"):
        derive_profiles(samples, [narrow])


def test_samples_of_different_ranks_cannot_share_an_engine():
    a = Sample((torch.randn(2, 8),), {}, None, 2)
    b = Sample((torch.randn(2, 8, 1),), {}, None, 2)
    with pytest.raises(ConfigError, match="one input signature"):
        recorded_shapes(SampleStore([a, b]))


# ----- the steps before TensorRT: export, profiles file ------------------------------------------------

class MaskedMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP(8)

    def forward(self, x, mask):
        return {"y": self.mlp(x) * mask, "sum": x.sum(dim=-1)}


def recorded_samples(module, batch_sizes):
    samples = []
    for bs in batch_sizes:
        x, mask = torch.randn(bs, 8), (torch.rand(bs, 8) > 0.3).float()
        with torch.no_grad():
            samples.append(Sample((x,), {"mask": mask}, module(x, mask=mask), bs))
    return SampleStore(samples, len(samples))


@pytest.mark.parametrize("mode", [ProfileMode.SINGLE, ProfileMode.SAMPLES_USED])
def test_prepare_exports_an_onnx_model_that_runs_every_profile_and_writes_the_profiles(tmp_path, mode):
    import onnxruntime as ort

    module = MaskedMLP().eval()
    samples = recorded_samples(module, (2, 8, 5))
    backend = TensorRTBackend(TensorRTBackendConfig(profiles=mode))
    onnx_path, profiles = backend.prepare(module, samples, tmp_path)
    assert onnx_path == tmp_path / "onnx" / "model.onnx"
    assert load_profiles(tmp_path / "tensorrt" / "profiles.json") == profiles
    assert len(profiles) == (1 if mode == ProfileMode.SINGLE else 3)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_0", "input_1"]
    for sample in samples:   # the one exported model serves every recorded batch size
        x, mask = sample.args[0], sample.kwargs["mask"]
        y, total = session.run(None, {"input_0": x.numpy(), "input_1": mask.numpy()})
        np.testing.assert_allclose(y, sample.outputs["y"].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(total, sample.outputs["sum"].numpy(), rtol=1e-5, atol=1e-5)


class SequenceMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = MLP(8)

    def forward(self, x):
        return self.mlp(x).mean(dim=1)


def test_prepare_exports_every_axis_the_profile_lets_vary(tmp_path):
    import onnx
    import onnxruntime as ort

    module = SequenceMean().eval()
    samples = []
    for bs, length in ((2, 3), (4, 7)):
        x = torch.randn(bs, length, 8)
        with torch.no_grad():
            samples.append(Sample((x,), {}, module(x), bs))
    onnx_path, [profile] = TensorRTBackend().prepare(module, SampleStore(samples), tmp_path)
    assert profile.shapes["input_0"] == ((2, 3, 8), (4, 7, 8), (4, 7, 8))
    dims = onnx.load(str(onnx_path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.HasField("dim_value") for d in dims] == [False, False, True]   # batch and length symbolic
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 5, 8)   # within the profile, a shape never recorded
    np.testing.assert_allclose(session.run(None, {"input_0": x.numpy()})[0], module(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_profiles_narrow_to_the_inputs_an_engine_has():
    """An exporter may drop an input the graph never reads: the engine's profiles then name the others."""
    profiles = derive_profiles(store((2, 8), (4, 8)), ProfileMode.SAMPLES_USED)
    engine_profiles = for_inputs(profiles, ["input_0"])
    assert [set(p.shapes) for p in engine_profiles] == [{"input_0"}, {"input_0"}]
    assert select_profile(engine_profiles, {"input_0": (4, 8)}) == 1


# ----- without TensorRT -------------------------------------------------------------------------------

@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here")
def test_building_without_tensorrt_names_the_extra(tmp_path):
    module = MaskedMLP().eval()
    with pytest.raises(MissingDependencyError, match=r"aitune-ray\[tensorrt\]"):
        TensorRTBackend().build(module, recorded_samples(module, (2,)), torch.device("cpu"), tmp_path)
    assert not any(tmp_path.rglob("*.onnx"))   # said before the export, not after it


def recorded_module(strategy):
    module = ait.Module(MLP(16), "mlp", strategy=strategy)
    for bs in (2, 4):
        module(torch.randn(bs, 16))
    return module


@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here")
@pytest.mark.parametrize("strategy_class", [ait.FirstWinsStrategy, ait.MaxThroughputStrategy])
def test_first_wins_and_max_throughput_go_on_without_tensorrt(strategy_class):
    strategy = strategy_class([TensorRTBackend(), TorchEagerBackend()], measure_config=FAST_MEASURE)
    strategy.enable_performance_validation(False)
    module = recorded_module(strategy)
    report = module.tune(device="cpu")
    by_backend = {r.backend: r for r in report.results}
    assert by_backend["TensorRTBackend"].status == "error"
    assert "aitune-ray[tensorrt]" in by_backend["TensorRTBackend"].error
    assert by_backend["TorchEagerBackend"].ok
    assert report.chosen == TorchEagerBackend().key()


@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here")
def test_one_backend_strategy_raises_the_missing_library_error():
    module = recorded_module(ait.OneBackendStrategy(TensorRTBackend(), measure_config=FAST_MEASURE))
    with pytest.raises(MissingDependencyError, match=r"pip install 'aitune-ray\[tensorrt\]'"):
        module.tune(device="cpu")
    assert module.state == ait.ModuleState.EAGER


# ----- checkpoint layout (the TensorRT steps carried out by ONNX Runtime) --------------------------------

class OrtRunner:
    """Runs the 'plan' (here: the ONNX bytes) in ONNX Runtime on the CPU, with the engine runner's interface."""

    def __init__(self, plan: bytes):
        import onnxruntime as ort

        self.session = ort.InferenceSession(plan, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs):
        outputs = self.session.run(None, {n: t.numpy() for n, t in inputs.items()})
        return {n: torch.from_numpy(o) for n, o in zip(self.output_names, outputs)}


class OrtEngineTensorRTBackend(TensorRTBackend):
    """TensorRTBackend whose three TensorRT steps are done by ONNX Runtime on the CPU: everything else (export,
    profiles, state, artifacts, load, output structure) is TensorRTBackend's own code."""

    def _require(self, device):
        pass

    def _build_engine(self, onnx_path, plan_path, profiles, settings, device):
        plan_path.write_bytes(Path(onnx_path).read_bytes())
        return plan_path

    def _runner(self, plan, device):
        return OrtRunner(plan)


def test_checkpoint_holds_the_plan_and_profiles_as_artifacts_and_no_pickle(tmp_path):
    strategy = ait.OneBackendStrategy(OrtEngineTensorRTBackend(TensorRTBackendConfig(profiles="samples_used")),
                                      measure_config=FAST_MEASURE)
    strategy.enable_performance_validation(False)
    module = ait.Module(MaskedMLP().eval(), "masked", strategy=strategy)
    inputs = [(torch.randn(bs, 8), torch.ones(bs, 8)) for bs in (2, 6)]
    for x, mask in inputs:
        module(x, mask=mask)
    report = module.tune(device="cpu")
    assert report.chosen is not None
    ait.save(module, tmp_path / "m.ait")
    with zipfile.ZipFile(tmp_path / "m.ait") as archive:
        names = archive.namelist()
        manifest = json.loads(archive.read("manifest.json"))
        profiles = json.loads(archive.read("modules/0/artifacts/profiles.json"))
    assert "modules/0/artifacts/model.plan" in names and "modules/0/artifacts/profiles.json" in names
    assert not [n for n in names if n.endswith((".pkl", ".pickle", ".pt"))]
    entry = manifest["modules"][0]
    assert sorted(entry["artifacts"]) == ["model.plan", "profiles.json"]
    assert [p["input_0"][0] for p in profiles] == [[2, 8], [6, 8]]   # one static profile per batch size
    assert entry["backend"]["config"]["profiles"] == "samples_used"

    with pytest.raises(CheckpointError, match="'model.plan' is code that runs as it loads"):
        ait.load(ait.Module(MaskedMLP().eval(), "masked"), tmp_path / "m.ait")   # an engine runs code as it loads
    loaded = ait.load(ait.Module(MaskedMLP().eval(), "masked"), tmp_path / "m.ait", allow_native_code=True)
    for x, mask in inputs:
        expected = module(x, mask=mask)
        got = loaded(x, mask=mask)
        assert sorted(got) == ["sum", "y"]
        torch.testing.assert_close(got["y"], expected["y"])


# ----- with TensorRT (the device machine, where TensorRT is installed) -----------------------------------

@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_tensorrt
@pytest.mark.parametrize("mode", [ProfileMode.SINGLE, ProfileMode.SAMPLES_USED])
def test_real_engine_matches_eager_and_survives_a_checkpoint(tmp_path, mode):
    device = torch.device("cuda")
    strategy = ait.OneBackendStrategy(TensorRTBackend(TensorRTBackendConfig(profiles=mode,
                                                                            timing_cache=str(tmp_path / "t.cache"))),
                                      measure_config=FAST_MEASURE)
    strategy.enable_performance_validation(False)
    module = ait.Module(MaskedMLP().eval().to(device), "masked", strategy=strategy)
    inputs = [(torch.randn(bs, 8, device=device), torch.ones(bs, 8, device=device)) for bs in (1, 4, 16)]
    for x, mask in inputs:
        module(x, mask=mask)
    eager = [module.module(x, mask=mask) for x, mask in inputs]
    report = module.tune(device=device)
    assert report.chosen is not None, report.decision
    assert (tmp_path / "t.cache").stat().st_size > 0
    backend = module.backend
    for (x, mask), want in zip(inputs, eager):
        got = module(x, mask=mask)
        torch.testing.assert_close(got["y"], want["y"], rtol=1e-3, atol=1e-3)
    if mode == ProfileMode.SAMPLES_USED:   # one CUDA graph per static profile, captured on first use
        assert backend._engine.captured_profiles == [0, 1, 2]
    ait.save(module, tmp_path / "m.ait")
    loaded = ait.load(ait.Module(MaskedMLP().eval().to(device), "masked"), tmp_path / "m.ait", allow_native_code=True)
    for (x, mask), want in zip(inputs, eager):
        torch.testing.assert_close(loaded(x, mask=mask)["y"], want["y"], rtol=1e-3, atol=1e-3)


@pytest.mark.tensorrt
@pytest.mark.gpu
@needs_tensorrt
def test_real_engine_with_fp16_autocast(tmp_path):
    device = torch.device("cuda")
    module = MaskedMLP().eval().to(device)
    samples = recorded_samples(module.cpu(), (4, 8)).to(device)
    module.to(device)
    backend = TensorRTBackend(TensorRTBackendConfig(quantization_config=ONNXAutoCastConfig("fp16")))
    backend.build(module, samples, device, tmp_path)
    for sample in samples:
        got = backend.infer(*sample.args, **sample.kwargs)
        torch.testing.assert_close(got["y"], sample.outputs["y"], rtol=2e-2, atol=2e-2)
