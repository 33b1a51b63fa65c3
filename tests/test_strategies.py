"""Strategy semantics with user-defined backends (tests/helpers.py) on a deliberately slow eager module."""

import math

import pytest
import torch

import aitune_ray as ait
from aitune_ray.cluster import InlineExecutor
from aitune_ray.decision import CONFIRM_FAILED, judge
from aitune_ray.decision.session import CONFIRM_ROUNDS
from aitune_ray.errors import CorrectnessError
from aitune_ray.records.results import OK
from tests.helpers import (CALLS, FAST_MEASURE, FailingBackend, FastBackend, HelperBuildFailure, HelperConfig,
                           SkewedBackend, SleepyAffine, SlowBackend, WrongBackend, fresh_counters, helper,
                           reset_calls)

EAGER_DELAY = 0.01



def recorded(strategy, batch_sizes=(4, 4), delay_s=EAGER_DELAY, name="affine"):
    """A wrapped SleepyAffine that has recorded one call per entry of batch_sizes."""
    module = ait.Module(SleepyAffine(delay_s), name=name, strategy=strategy)
    for i, bs in enumerate(batch_sizes):
        module(torch.full((bs, 3), float(i + 1)))
    return module


def fast(tag="fast", delay_s=0.0):
    return helper(FastBackend, tag, delay_s=delay_s)


def slow(tag="slow", delay_s=3 * EAGER_DELAY):
    return helper(SlowBackend, tag, delay_s=delay_s)


def wrong(tag="wrong"):
    return helper(WrongBackend, tag, offset=0.5)


def failing(tag="failing"):
    return helper(FailingBackend, tag)


def result_of(report, backend):
    return next(r for r in report.results if r.key == backend.key())


# ----- OneBackendStrategy ------------------------------------------------------------------------


def test_one_backend_build_failure_raises_the_backends_own_exception():
    module = recorded(ait.OneBackendStrategy(failing(), measure_config=FAST_MEASURE))
    with pytest.raises(HelperBuildFailure, match="failing cannot build"):
        module.tune(device="cpu")
    assert module.state == ait.ModuleState.EAGER
    assert "HelperBuildFailure" in module.failure


def test_one_backend_wrong_outputs_raise_correctness_error():
    module = recorded(ait.OneBackendStrategy(wrong(), measure_config=FAST_MEASURE))
    with pytest.raises(CorrectnessError, match="relative L2 error"):
        module.tune(device="cpu")
    assert module.state == ait.ModuleState.EAGER
    x = torch.ones(2, 3)
    assert torch.equal(module(x), x * 2 + 1)          # still the eager module's answer


def test_one_backend_correct_but_slower_falls_back_to_eager():
    backend = slow()
    module = recorded(ait.OneBackendStrategy(backend, measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert module.state == ait.ModuleState.TUNED and module.backend is None   # AITune's eager baseline backend
    assert module.backend is None
    assert report.chosen is None
    assert "kept eager" in report.decision and "not faster" in report.decision
    assert "slower than eager at its screening" in report.decision   # paired with eager right after its build
    assert result_of(report, backend).status == OK
    before = CALLS["infer:slow"]
    module(torch.ones(4, 3))
    assert CALLS["infer:slow"] == before               # calls do not reach the rejected backend


def test_one_backend_faster_is_chosen_and_serves_calls():
    backend = fast()
    module = recorded(ait.OneBackendStrategy(backend, measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert module.state == ait.ModuleState.TUNED
    assert report.chosen == backend.key()
    assert report.decision.startswith("chose FastBackend")
    assert report.speedups[backend.key()] > 5
    eager_calls, infer_calls = module.module.calls, CALLS["infer:fast"]
    x = torch.randn(4, 3)
    assert torch.equal(module(x), x * 2 + 1)
    assert CALLS["infer:fast"] == infer_calls + 1
    assert module.module.calls == eager_calls          # the slow eager module is no longer called


# ----- FirstWinsStrategy ---------------------------------------------------------------------


def test_first_wins_moves_past_failures_and_keeps_priority_order():
    first, later = fast("first", delay_s=EAGER_DELAY / 3), fast("later", delay_s=0.0)
    backends = [failing(), wrong(), slow(), first, later]
    module = recorded(ait.FirstWinsStrategy(backends, measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    # The first backend that builds, is correct and beats eager wins, though "later" is faster still.
    assert report.chosen == first.key()
    assert module.state == ait.ModuleState.TUNED
    assert "the first accepted in priority order" in report.decision
    # Every candidate before the winner was tried once; none after it.
    assert [CALLS[f"build:{t}"] for t in ("failing", "wrong", "slow", "first", "later")] == [1, 1, 1, 1, 0]
    assert [r.key for r in report.results] == [b.key() for b in backends[:4]]
    assert [r.status for r in report.results] == ["error", "rejected", "ok", "ok"]
    before = CALLS["infer:first"]
    module(torch.ones(4, 3))
    assert CALLS["infer:first"] == before + 1


def test_first_wins_stops_after_the_first_win():
    backends = [fast("a"), fast("b"), fast("c")]
    module = recorded(ait.FirstWinsStrategy(backends, measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen == backends[0].key()
    assert CALLS["build:a"] == 1 and CALLS["build:b"] == 0 and CALLS["build:c"] == 0
    assert len(report.results) == 1


def test_first_wins_keeps_eager_when_all_fail():
    module = recorded(ait.FirstWinsStrategy([failing(), wrong(), slow()], measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen is None
    assert module.state == ait.ModuleState.TUNED and module.backend is None
    assert report.decision.startswith("kept eager")
    for name in ("FailingBackend: error", "WrongBackend: rejected", "SlowBackend: slower than eager at its screening"):
        assert name in report.decision
    assert len(report.results) == 3


# ----- MaxThroughputStrategy ----------------------------------------------------------------


def test_max_throughput_picks_the_fastest_passing_backend():
    quick, quickest = fast("quick", delay_s=EAGER_DELAY / 3), fast("quickest", delay_s=0.0)
    backends = [failing(), quick, wrong(), quickest, slow()]
    module = recorded(ait.MaxThroughputStrategy(backends, measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen == quickest.key()
    assert module.state == ait.ModuleState.TUNED
    assert all(CALLS[f"build:{t}"] == 1 for t in ("failing", "quick", "wrong", "quickest", "slow"))
    assert len(report.results) == 5
    assert report.speedups[quickest.key()] > report.speedups[quick.key()] > 1.0
    # both confirmed in one session (K=2: slow was pruned by its screening), the higher median chosen
    assert report.verdicts[quickest.key()]["interval"]["paired"] and report.verdicts[quick.key()]["interval"]["paired"]
    assert report.verdict["finalists"] == 2 and "K=2" in report.decision
    assert "slower than eager at its screening" in report.notes[result_of(report, backends[4]).key]


def test_max_throughput_without_performance_validation_picks_fastest_successful():
    slower, slowest = slow("slower", delay_s=2 * EAGER_DELAY), slow("slowest", delay_s=4 * EAGER_DELAY)
    strategy = ait.MaxThroughputStrategy([slowest, wrong(), slower], measure_config=FAST_MEASURE)
    assert strategy.enable_performance_validation(False) is strategy
    module = recorded(strategy)
    report = module.tune(device="cpu")
    assert report.chosen == slower.key()            # slower than eager, but validation is off
    assert report.speedups[slower.key()] < 1.0
    assert module.state == ait.ModuleState.TUNED
    assert "performance validation off" in report.decision


def test_max_throughput_keeps_eager_when_no_backend_beats_eager():
    module = recorded(ait.MaxThroughputStrategy([slow("s1"), slow("s2", delay_s=2 * EAGER_DELAY), wrong()],
                                                measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen is None
    assert module.state == ait.ModuleState.TUNED and module.backend is None
    assert report.decision.startswith("kept eager: not faster")
    assert "SlowBackend" in report.decision


def test_max_throughput_keeps_eager_when_every_backend_fails():
    module = recorded(ait.MaxThroughputStrategy([failing(), wrong()], measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen is None and module.state == ait.ModuleState.EAGER
    assert "FailingBackend: error" in report.decision and "WrongBackend: rejected" in report.decision


def test_min_speedup_ratio_is_enforced_through_the_strategy():
    # ~1.4x faster than eager: enough for the default 1%, not for a required 4x.
    module = recorded(ait.MaxThroughputStrategy([fast("mild", delay_s=EAGER_DELAY * 0.7)],
                                                min_speedup_ratio=3.0, measure_config=FAST_MEASURE))
    report = module.tune(device="cpu")
    assert report.chosen is None
    assert "needs 4.000x" in report.decision


def _rounds(ms_by_bs: dict, n: int = 40) -> dict:
    return {bs: [ms] * n for bs, ms in ms_by_bs.items()}


def test_min_speedup_ratio_defaults_to_one_percent():
    strategy = ait.MaxThroughputStrategy([fast()])
    assert strategy.min_speedup_ratio == 0.01 and strategy.rule().gate == pytest.approx(1.01)
    eager, mix = _rounds({1: 10.0}), {1: 1}
    assert not judge("c", eager, _rounds({1: 10.0 / 1.005}), mix, strategy.rule(), 1).accepted   # 0.5% faster
    assert judge("c", eager, _rounds({1: 10.0 / 1.02}), mix, strategy.rule(), 1).accepted         # 2% faster
    stricter = ait.MaxThroughputStrategy([fast()], min_speedup_ratio=0.05)
    assert not judge("c", eager, _rounds({1: 10.0 / 1.02}), mix, stricter.rule(), 1).accepted
    off = ait.MaxThroughputStrategy([fast()]).enable_performance_validation(False)
    assert not off.rule().enabled


def test_the_rule_judges_the_recorded_call_mix():
    rule = ait.FirstWinsStrategy([fast()]).rule()
    eager = _rounds({1: 10.0, 8: 10.0})
    # 2x faster at bs 8, 1% slower at bs 1 (inside the 3% noise tolerance): accepted on a bs-8-heavy mix.
    outcome = judge("c", eager, _rounds({1: 10.1, 8: 5.0}), {1: 1, 8: 3}, rule, 1)
    assert outcome.accepted
    assert outcome.median == pytest.approx(40.0 / 25.1)
    assert outcome.intervals[1]["median"] == pytest.approx(10 / 10.1) and outcome.intervals[8]["median"] == 2.0


# ----- batch-size mix --------------------------------------------------------------------------


def test_backend_faster_at_large_batch_but_slower_at_small_is_not_chosen():
    eager_delay = 0.02
    skewed = helper(SkewedBackend, "skewed", delay_s=1.5 * eager_delay, large_delay_s=0.0, large_from=8)
    steady = fast("steady", delay_s=0.6 * eager_delay)
    strategy = ait.MaxThroughputStrategy([skewed, steady], measure_config=FAST_MEASURE)
    module = recorded(strategy, batch_sizes=(1, 8, 8, 8), delay_s=eager_delay)
    report = module.tune(device="cpu")
    assert report.call_mix == {1: 1, 8: 3}
    # Over the recorded mix the skewed backend is the faster one, but it loses at batch size 1.
    assert report.speedups[skewed.key()] > report.speedups[steady.key()] > 1.0
    assert report.chosen == steady.key()
    note = report.notes[skewed.key()]
    assert "wins at bs 8" in note and "slower than eager at bs 1" in note
    assert "wins at bs 1" not in note and "slower than eager at bs 8" not in note
    assert note in report.dataframe().set_index("backend").loc["SkewedBackend", "note"]


def test_backend_slower_at_a_small_batch_alone_keeps_eager():
    eager_delay = 0.02
    skewed = helper(SkewedBackend, "skewed", delay_s=1.5 * eager_delay, large_delay_s=0.0, large_from=8)
    module = recorded(ait.OneBackendStrategy(skewed, measure_config=FAST_MEASURE), batch_sizes=(1, 8),
                      delay_s=eager_delay)
    report = module.tune(device="cpu")
    assert report.chosen is None
    assert "wins at bs 8" in report.decision and "slower than eager at bs 1" in report.decision


# ----- report ------------------------------------------------------------------------------------


def test_report_dataframe_and_markdown():
    backends = [failing(), wrong(), slow(), fast()]
    module = recorded(ait.MaxThroughputStrategy(backends, measure_config=FAST_MEASURE), batch_sizes=(1, 4, 4))
    report = module.tune(device="cpu")
    df = report.dataframe()
    assert len(df) == len(backends) + 1
    assert list(df["backend"]) == ["TorchEager (baseline)", "FailingBackend", "WrongBackend", "SlowBackend",
                                   "FastBackend"]
    for column in ("status", "error", "correctness_error", "build_s", "throughput_bs1", "throughput_bs4",
                   "latency_ms_bs1", "latency_ms_bs4", "p90_ms_bs1", "p90_ms_bs4", "ms_per_call_bs1",
                   "speedup_bs1", "speedup_low_bs4", "speedup_high", "rounds", "verdict"):
        assert column in df.columns, column
    rows = df.set_index("backend")
    assert list(rows["status"]) == ["ok", "error", "rejected", "ok", "ok"]
    assert "HelperBuildFailure" in rows.loc["FailingBackend", "error"]
    assert "failing cannot build" in rows.loc["FailingBackend", "error"]
    assert "relative L2" in rows.loc["WrongBackend", "error"]
    assert rows.loc["WrongBackend", "correctness_error"] > 0.01
    assert rows.loc["FastBackend", "correctness_error"] == 0.0
    assert math.isnan(rows.loc["FailingBackend", "latency_ms_bs1"])
    assert list(rows["chosen"]) == [False, False, False, False, True]
    for bs in (1, 4):
        eager_ms = rows.loc["TorchEager (baseline)", f"ms_per_call_bs{bs}"]
        assert eager_ms >= EAGER_DELAY * 1e3
        assert rows.loc["SlowBackend", f"ms_per_call_bs{bs}"] > eager_ms > rows.loc["FastBackend", f"ms_per_call_bs{bs}"]
        # single-call latency, apart from the serving loop's time per call
        assert rows.loc["SlowBackend", f"latency_ms_bs{bs}"] > rows.loc["FastBackend", f"latency_ms_bs{bs}"]
        assert rows.loc["SlowBackend", f"p90_ms_bs{bs}"] >= rows.loc["SlowBackend", f"latency_ms_bs{bs}"]
        assert rows.loc["TorchEager (baseline)", f"throughput_bs{bs}"] == pytest.approx(bs / (eager_ms / 1e3))
    fast_row = rows.loc["FastBackend"]
    assert fast_row["verdict"] == "faster" and fast_row["rounds"] == CONFIRM_ROUNDS and fast_row["paired"]
    assert fast_row["speedup_low"] <= fast_row["speedup"] <= fast_row["speedup_high"]
    assert fast_row["speedup_low_bs4"] >= 1.01
    assert (rows["build_s"] >= 0).all()

    text = report.markdown()
    for name in ("TorchEager (baseline)", "FailingBackend", "WrongBackend", "SlowBackend", "FastBackend"):
        assert name in text
    assert f"Decision: {report.decision}" in text
    assert "FastBackend **(chosen)**" in text
    assert "| bs1 speedup [CI]; thr/s, ms/call; latency p50/p90 ms" in text and "bs4 speedup" in text
    assert f"{CONFIRM_ROUNDS} paired rounds" in text and "latency: single calls" in text


def test_max_throughput_starts_costly_builds_first_and_first_wins_keeps_priority():
    from aitune_ray.backend import (ONNXRuntimeBackend, TorchAOBackend, TorchAOBackendConfig,
                                    TorchInductorAotBackend, TorchInductorJitBackend)

    backends = [ONNXRuntimeBackend(), TorchInductorJitBackend(),
                TorchAOBackend(TorchAOBackendConfig(quantization="int8dq")), TorchInductorAotBackend()]
    keys = [b.key() for b in backends]
    longest_first = [job.key for job in ait.MaxThroughputStrategy(backends).jobs()]
    assert longest_first == [keys[3], keys[2], keys[1], keys[0]]
    assert [job.key for job in ait.FirstWinsStrategy(backends).jobs()] == keys
    # the original position still travels with each job
    assert sorted(job.priority for job in ait.MaxThroughputStrategy(backends).jobs()) == [0, 1, 2, 3]


class DriftingBackend(FastBackend):
    """Slower than eager while it is first timed (as on a GPU that was throttled then), fast once it is
    activated again, which the inline executor does to re-measure finalists."""

    def _build(self, module, samples, device, workdir) -> None:
        super()._build(module, samples, device, workdir)
        self.reactivated = False

    def _activate(self) -> None:
        self.reactivated = True

    def _sleep_for(self, x):
        return 0.0 if self.reactivated else 1.5 * EAGER_DELAY


def test_a_backend_slower_when_screened_is_never_confirmed_and_no_rounds_keep_eager():
    # screening times the build as it is right after it was made, paired with eager: this one is slower
    # there (its speed would change once re-activated), so it never reaches a confirm session
    drifting = DriftingBackend(HelperConfig(tag="drifting"))
    module = recorded(ait.MaxThroughputStrategy([drifting], measure_config=FAST_MEASURE))
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=10))
    assert report.chosen is None and "slower than eager at its screening" in report.decision
    assert not result_of(report, drifting).remeasured
    # a confirm session of no rounds cannot run: eager is kept, and the verdict says why
    module = recorded(ait.MaxThroughputStrategy([fast()], measure_config=FAST_MEASURE))
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=0))
    assert report.chosen is None and report.verdict["kind"] == CONFIRM_FAILED and "round" in report.decision
