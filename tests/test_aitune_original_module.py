"""As in AITune, wrapping replaces the original module's own forward with the wrapper's proxy: code that keeps
calling the original object records, runs the tuned backend, saves and loads as the wrapper does."""

import pytest
import torch

import aitune_ray as ait
from tests.helpers import CALLS, FAST_MEASURE, FastBackend, SleepyAffine, fresh_counters, helper  # noqa: F401


def one(tag="f"):
    """The backend taken once it builds and is correct (no timing decides here: this file is about call paths)."""
    return ait.OneBackendStrategy(helper(FastBackend, tag), measure_config=FAST_MEASURE).enable_performance_validation(
        ait.PerformanceValidationMode.DISABLED)


def test_calling_the_original_object_records_then_runs_the_tuned_backend():
    model = SleepyAffine(0.0)
    wrapper = ait.Module(model, name="affine", strategy=one())
    x = torch.randn(2, 3)
    assert torch.allclose(model(x), x * 2 + 1)
    assert len(wrapper.samples) == 1 and model.calls == 1   # recorded through the original object

    wrapper.tune()
    assert wrapper.state == ait.ModuleState.TUNED
    before, eager_calls = CALLS["infer:f"], model.calls   # tuning timed eager on the samples
    out = model(x)
    assert CALLS["infer:f"] == before + 1 and model.calls == eager_calls   # the backend ran, not the eager forward
    assert torch.allclose(out, x * 2 + 1)
    assert wrapper.module is model


def test_wrap_result_ignored_then_tune_the_original_model():
    """AITune's ESM2 example: wrap(model, modules) with the result ignored, then tune(model, ...)."""
    model = SleepyAffine(0.0)
    data = [torch.randn(3) for _ in range(2)]
    modules = ait.inspect(model, data, number_of_iterations=1, warmup_iterations=0).get_modules()
    ait.wrap(model, modules, strategy=one())
    report = ait.tune(model, data, batch_sizes=[1, 2])
    assert [m.module for m in report.modules] == ["SleepyAffine"]
    before = CALLS["infer:f"]
    model(torch.randn(1, 3))
    assert CALLS["infer:f"] == before + 1


def test_save_from_the_original_object_and_load_into_a_plain_or_wrapped_one(tmp_path):
    model = SleepyAffine(0.0)
    wrapper = ait.Module(model, name="affine", strategy=one())
    wrapper(torch.randn(2, 3))
    wrapper.tune()
    path = ait.save(model, tmp_path / "m.ait")

    fresh = SleepyAffine(0.0)
    loaded = ait.load(fresh, path)
    assert loaded.state == ait.ModuleState.TUNED and loaded.module is fresh
    before = CALLS["infer:f"]
    fresh(torch.randn(2, 3))                 # the plain module now runs the loaded backend as well
    assert CALLS["infer:f"] == before + 1 and fresh.calls == 0

    again = ait.load(model, path)            # the original object of a wrapper: loads into that wrapper
    assert again is model
    model(torch.randn(2, 3))
    assert CALLS["infer:f"] == before + 2


def test_a_failed_load_leaves_the_plain_module_unwrapped(tmp_path):
    bad = tmp_path / "bad.ait"
    bad.write_bytes(b"not a checkpoint")
    plain = SleepyAffine(0.0)
    with pytest.raises(ait.AITuneRayError):
        ait.load(plain, bad)
    assert "forward" not in vars(plain)
    plain(torch.randn(2, 3))
    assert plain.calls == 1


def test_wrapping_the_same_module_again_hands_its_calls_to_the_new_wrapper():
    model = SleepyAffine(0.0)
    first = ait.Module(model, name="first")
    second = ait.Module(model, name="second")
    model(torch.randn(2, 3))
    assert (len(first.samples), len(second.samples)) == (0, 1)
    first(torch.randn(2, 3))                      # the earlier wrapper still works on its own
    assert (len(first.samples), len(second.samples)) == (1, 1)
    with second.unpatched():
        assert "forward" not in vars(model)       # the module's own forward, as before either wrapper


def test_the_original_forward_signature_still_reads():
    import inspect

    model = SleepyAffine(0.0)
    ait.Module(model)
    assert list(inspect.signature(model.forward).parameters) == ["x"]
