"""Module recording, tune() over a function and a dataset, failures, and bad-input errors."""

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.errors import (AITuneRayError, ConfigError, CorrectnessError, DatasetError, DeviceError,
                               RecordingError)
from tests.helpers import (CALLS, FAST_MEASURE, FailingBackend, FastBackend, HelperBuildFailure, NestedIO,
                           SleepyAffine, WrongBackend, fresh_counters, helper, reset_calls)



def one(backend):
    return ait.OneBackendStrategy(backend, measure_config=FAST_MEASURE)


# ----- recording ---------------------------------------------------------------------------------


def test_records_positional_keyword_nested_and_plain_inputs():
    module = ait.Module(NestedIO(), name="nested", strategy=one(helper(FastBackend, "f")))
    x = torch.randn(3, 4)
    a, b, c = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4)
    extras = {"w": torch.randn(4), "n": 5, "label": None}
    out = module(x, [a, (b, c)], extras=extras, scale=0.5, tag="first")

    assert len(module.samples) == 1
    sample = module.samples.samples[0]
    assert sample.batch_size == 3
    assert len(sample.args) == 2 and torch.equal(sample.args[0], x)
    pair = sample.args[1]
    assert isinstance(pair, list) and isinstance(pair[1], tuple)
    assert torch.equal(pair[0], a) and torch.equal(pair[1][0], b) and torch.equal(pair[1][1], c)
    assert set(sample.kwargs) == {"extras", "scale", "tag"}
    assert sample.kwargs["scale"] == 0.5 and sample.kwargs["tag"] == "first"
    assert torch.equal(sample.kwargs["extras"]["w"], extras["w"])
    assert sample.kwargs["extras"]["n"] == 5 and sample.kwargs["extras"]["label"] is None

    # The eager outputs are returned to the caller and kept with the sample.
    expected = x * 0.5 + a + b * c + extras["w"]
    assert torch.allclose(out["total"], expected)
    assert torch.equal(sample.outputs["total"], out["total"])
    assert isinstance(sample.outputs["parts"], tuple) and sample.outputs["parts"][1] == [10]
    assert sample.outputs["tag"] == "first"
    assert module.module.seen == [("first", 0.5)]


def test_recorded_inputs_and_outputs_are_copies():
    module = ait.Module(SleepyAffine(0.0), name="affine")
    x = torch.ones(2, 3)
    out = module(x)
    x.add_(100.0)
    out.mul_(0.0)
    sample = module.samples.samples[0]
    assert torch.equal(sample.args[0], torch.ones(2, 3))
    assert torch.equal(sample.outputs, torch.full((2, 3), 3.0))


def test_max_samples_caps_recording_but_not_calls():
    module = ait.Module(SleepyAffine(0.0), name="affine", max_samples=3)
    for bs in (1, 2, 3, 4, 5):
        out = module(torch.ones(bs, 2))
        assert out.shape == (bs, 2)
    assert len(module.samples) == 3
    assert module.samples.calls_seen == 5
    assert module.module.calls == 5
    assert [s.batch_size for s in module.samples] == [1, 2, 3]
    assert module.samples.call_mix() == {1: 1, 2: 1, 3: 1}


def test_unrecordable_input_is_a_recording_error():
    class TakesAnything(nn.Module):
        def forward(self, x, thing):
            return x

    module = ait.Module(TakesAnything(), name="takes")
    with pytest.raises(RecordingError, match="object"):
        module(torch.ones(2), object())


def test_wrapped_module_attributes_are_reachable():
    module = ait.Module(SleepyAffine(0.0, scale=7.0), name="affine")
    assert module.scale == 7.0
    assert module.name == "affine"
    assert ait.Module(SleepyAffine(0.0)).name == "tests.helpers.SleepyAffine"   # AITune's qualified name
    assert module.state == ait.ModuleState.RECORDING


# ----- tuning a Module -------------------------------------------------------------------------


def test_calls_after_tuning_go_to_the_chosen_backend():
    module = ait.Module(SleepyAffine(0.005), name="affine", strategy=one(helper(FastBackend, "chosen")))
    for bs in (2, 4):
        module(torch.randn(bs, 3))
    report = module.tune(device="cpu")
    assert report.chosen is not None
    assert module.state == ait.ModuleState.TUNED
    assert isinstance(module.backend, FastBackend)
    eager_calls, infer_calls = module.module.calls, CALLS["infer:chosen"]
    for _ in range(3):
        x = torch.randn(4, 3)
        assert torch.equal(module(x), x * 2 + 1)
    assert CALLS["infer:chosen"] == infer_calls + 3
    assert module.module.calls == eager_calls


def test_module_tune_reraises_strategy_error_and_stays_eager():
    module = ait.Module(SleepyAffine(0.0), name="affine", strategy=one(helper(FailingBackend, "boom")))
    module(torch.ones(2, 3))
    with pytest.raises(HelperBuildFailure):
        module.tune(device="cpu")
    assert module.state == ait.ModuleState.EAGER
    assert "boom cannot build" in module.failure
    assert torch.equal(module(torch.ones(2, 3)), torch.full((2, 3), 3.0))

    wrong = ait.Module(SleepyAffine(0.0), name="wrong", strategy=one(helper(WrongBackend, "w", offset=1.0)))
    wrong(torch.ones(2, 3))
    with pytest.raises(CorrectnessError):
        wrong.tune(device="cpu")
    assert wrong.state == ait.ModuleState.EAGER


# ----- tune(func, dataset) -----------------------------------------------------------------------


class Pipeline:
    """Two wrapped modules called by a plain function, the way a user pipeline holds them."""

    def __init__(self, first_strategy, second_strategy):
        self.encoder = ait.Module(SleepyAffine(0.005, scale=2.0, bias=1.0), name="encoder", strategy=first_strategy)
        self.head = ait.Module(SleepyAffine(0.005, scale=3.0, bias=0.0), name="head", strategy=second_strategy)
        self.calls = []

    def __call__(self, x, shift=0.0):
        self.calls.append((tuple(x.shape), shift))
        return self.head(self.encoder(x) + shift)


def test_tune_unpacks_items_and_tunes_every_wrapped_module():
    pipe = Pipeline(one(helper(FastBackend, "enc")), one(helper(FastBackend, "head")))
    dataset = [
        (torch.randn(2, 3),),                      # a tuple: positional arguments
        (torch.randn(4, 3), 1.0),
        {"x": torch.randn(4, 3), "shift": 2.0},    # a dict: keyword arguments
        torch.randn(2, 3),                         # anything else: the one argument
    ]
    report = ait.tune(pipe, dataset, device="cpu", call_as_given=True)
    assert pipe.calls == [((2, 3), 0.0), ((4, 3), 1.0), ((4, 3), 2.0), ((2, 3), 0.0)]
    assert [m.module for m in report.modules] == ["encoder", "head"]
    assert report.failures == {}
    for module, tag in ((pipe.encoder, "enc"), (pipe.head, "head")):
        assert len(module.samples) == 4
        assert module.samples.call_mix() == {2: 2, 4: 2}
        assert module.state == ait.ModuleState.TUNED
        assert CALLS[f"build:{tag}"] == 1
    # The head recorded what the encoder really produced, shift included.
    head_inputs = [s.args[0] for s in pipe.head.samples]
    encoder_outputs = [s.outputs for s in pipe.encoder.samples]
    for shift, got, enc in zip((0.0, 1.0, 2.0, 0.0), head_inputs, encoder_outputs):
        assert torch.allclose(got, enc + shift)
    x = torch.randn(3, 3)
    assert torch.allclose(pipe(x), (x * 2 + 1) * 3)
    assert CALLS["infer:enc"] > 0 and CALLS["infer:head"] > 0


def test_tune_accepts_a_generator_and_a_single_tensor():
    pipe = Pipeline(one(helper(FastBackend, "enc")), one(helper(FastBackend, "head")))
    ait.tune(pipe, (torch.randn(2, 3) for _ in range(2)), device="cpu", call_as_given=True)
    assert len(pipe.encoder.samples) == 2
    lone = ait.Module(SleepyAffine(0.0), name="lone", strategy=one(helper(FastBackend, "lone")))
    ait.tune(lone, torch.randn(5, 3), device="cpu", call_as_given=True)
    assert [s.batch_size for s in lone.samples] == [5]


def test_a_failing_module_stays_eager_and_tuning_goes_on():
    pipe = Pipeline(one(helper(FailingBackend, "enc")), one(helper(FastBackend, "head")))
    report = ait.tune(pipe, [torch.randn(2, 3), torch.randn(2, 3)], device="cpu", call_as_given=True)
    assert pipe.encoder.state == ait.ModuleState.EAGER
    assert set(report.failures) == {"encoder"}
    assert "HelperBuildFailure" in report.failures["encoder"]
    assert "Stayed eager" in report.markdown()
    # The next module was still tuned.
    assert pipe.head.state == ait.ModuleState.TUNED
    # The failed module keeps its report row: the candidate, its status and its error.
    assert [m.module for m in report.modules] == ["encoder", "head"]
    failed = report.modules[0].results[0]
    assert failed.status == "error" and "HelperBuildFailure" in failed.error
    x = torch.randn(2, 3)
    assert torch.allclose(pipe(x), (x * 2 + 1) * 3)


# ----- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["not a module", lambda x: x, torch.ones(2)])
def test_module_requires_an_nn_module(value):
    with pytest.raises(ConfigError, match=type(value).__name__):
        ait.Module(value)


def test_module_cannot_wrap_a_wrapped_module():
    with pytest.raises(ConfigError, match="already wrapped"):
        ait.Module(ait.Module(SleepyAffine(0.0)))


def test_empty_dataset_is_a_dataset_error():
    module = ait.Module(SleepyAffine(0.0), strategy=one(helper(FastBackend, "f")))
    with pytest.raises(DatasetError, match="empty"):
        ait.tune(module, [], device="cpu", call_as_given=True)
    assert len(module.samples) == 0


def test_dataset_item_the_function_cannot_take_is_a_dataset_error():
    module = ait.Module(SleepyAffine(0.0), strategy=one(helper(FastBackend, "f")))

    def run(x):
        return module(x)

    with pytest.raises(DatasetError, match=r"dataset item 1 \(tuple\).*run.*TypeError"):
        ait.tune(run, [torch.ones(2, 3), (torch.ones(2, 3), torch.ones(2, 3))], device="cpu", call_as_given=True)
    with pytest.raises(DatasetError, match=r"dataset item 0 \(dict\)"):
        ait.tune(run, [{"y": torch.ones(2, 3)}], device="cpu", call_as_given=True)


def test_function_that_reaches_no_module_is_a_recording_error():
    with pytest.raises(RecordingError, match="no aitune_ray.Module"):
        ait.tune(lambda x: x * 2, [torch.ones(2)], device="cpu", call_as_given=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a CPU-only machine")
@pytest.mark.parametrize("device", ["cuda", "cuda:7"])
def test_missing_cuda_device_is_a_device_error(device):
    module = ait.Module(SleepyAffine(0.0), strategy=one(helper(FastBackend, "f")))
    with pytest.raises(DeviceError, match="no CUDA GPU") as info:
        ait.tune(module, [torch.ones(2, 3)], device=device, call_as_given=True)
    assert repr(device) in str(info.value)
    assert len(module.samples) == 0            # rejected before any recording
    module(torch.ones(2, 3))
    with pytest.raises(DeviceError):
        module.tune(device=device)
    assert CALLS["build:f"] == 0


def test_cuda_index_past_the_last_gpu_is_a_device_error():
    if torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    from aitune_ray.runtime.device import resolve_device

    with pytest.raises(DeviceError, match="cuda:7"):
        resolve_device("cuda:7")


@pytest.mark.parametrize("device", ["tpu", "tpu:0"])
def test_unknown_device_type_is_a_device_error(device):
    module = ait.Module(SleepyAffine(0.0), strategy=one(helper(FastBackend, "f")))
    with pytest.raises(DeviceError, match="tpu"):
        ait.tune(module, [torch.ones(2, 3)], device=device, call_as_given=True)


def test_unsupported_device_type_is_a_device_error():
    with pytest.raises(DeviceError, match="'meta' is not supported"):
        ait.tune(ait.Module(SleepyAffine(0.0)), [torch.ones(2, 3)], device="meta", call_as_given=True)


def test_tuning_a_module_with_no_samples_is_a_recording_error():
    module = ait.Module(SleepyAffine(0.0), name="unused", strategy=one(helper(FastBackend, "f")))
    with pytest.raises(RecordingError, match="unused has no recorded samples"):
        module.tune(device="cpu")
    assert module.state == ait.ModuleState.EAGER
    assert CALLS["build:f"] == 0


def test_every_error_is_an_aitune_ray_error():
    for cls in (ConfigError, DatasetError, DeviceError, RecordingError, CorrectnessError):
        assert issubclass(cls, AITuneRayError)
