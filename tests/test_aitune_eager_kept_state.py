"""When no candidate beats eager the module is TUNED, as in AITune (whose strategy returns the eager baseline as
the backend): calls run eagerly, the report keeps the reason, and a checkpoint loads it TUNED again. A module
whose every candidate failed stays EAGER with the failure (AITune raises there)."""

import torch

import aitune_ray as ait
from aitune_ray.report.answer import answer
from tests.helpers import (CALLS, FAST_MEASURE, FailingBackend, SleepyAffine, SlowBackend, fresh_counters,  # noqa: F401
                           helper)


def recorded(strategy):
    module = ait.Module(SleepyAffine(0.005), name="affine", strategy=strategy)
    module(torch.ones(2, 3))
    return module


def test_eager_kept_because_no_candidate_was_faster_is_tuned_with_the_reason(tmp_path):
    module = recorded(ait.MaxThroughputStrategy([helper(SlowBackend, "slow", delay_s=0.02)],
                                                measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen is None
    assert module.state == ait.ModuleState.TUNED and module.backend is None and module.failure == ""
    assert report.decision.startswith("kept eager") and "SlowBackend" in report.decision
    assert "keep eager" in answer(report)
    before, calls = CALLS["infer:slow"], module.module.calls
    assert torch.allclose(module(torch.ones(2, 3)), torch.full((2, 3), 3.0))
    assert CALLS["infer:slow"] == before and module.module.calls == calls + 1   # eager ran

    fresh = ait.Module(SleepyAffine(0.0), name="affine")
    ait.load(fresh, ait.save(module, tmp_path / "kept.ait"))
    assert fresh.state == ait.ModuleState.TUNED and fresh.backend is None


def test_every_candidate_failing_stays_eager_with_the_failure():
    module = recorded(ait.MaxThroughputStrategy([helper(FailingBackend, "bad")], measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen is None
    assert module.state == ait.ModuleState.EAGER and "FailingBackend" in module.failure
