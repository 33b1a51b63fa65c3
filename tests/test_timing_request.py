"""The one timing request: its context reaches the calls, its rounds travel in it, it is the only way the
library times anything, and a later check that disagrees with the decision is named as a measurement problem."""

import ast
import os
import pathlib

import pytest
import torch

import aitune_ray as ait
from aitune_ray.api.tuning import tune_modules
from aitune_ray.cluster import InlineExecutor
from aitune_ray.decision import Rule, Session
from aitune_ray.decision.choose import decide
from aitune_ray.decision.agreement import AGREES, CONTEXT_MISMATCH, HOST_UNFIT, agreement
from aitune_ray.decision.verdict import HOST_UNFIT as UNFIT_VERDICT
from aitune_ray.measure import timing
from aitune_ray.measure.request import DEFAULT_ROUNDS, ServingContext, ThreadsChanged, TimingRequest
from aitune_ray.decision.rule import intervals
from aitune_ray.measure.timing import MIX, MeasureConfig
from aitune_ray.model.samples import Sample, SampleStore
from aitune_ray.report.answer import answer
from aitune_ray.testing import SimAffine, sim

CPU = torch.device("cpu")
QUICK = MeasureConfig(warmup_runs=1, cpu_burst_ms=0.0, latency_runs=0, min_runs=3, max_runs=3)
PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "aitune_ray"
#: The low-level timer of aitune_ray.measure.timing: only aitune_ray.measure may call it.
LOW_LEVEL = {"measure", "profile_samples", "profile_side_by_side", "paired_rounds", "see_every_size",
             "burst_length", "_time_once", "_timed_burst"}


def other_threads() -> int:
    """A thread count other than this process's now (1, or 2 where it has 1)."""
    return 2 if torch.get_num_threads() == 1 else 1


def store(sizes=(1, 2)) -> SampleStore:
    return SampleStore([Sample((torch.ones(bs, 3),), {}, None, bs) for bs in sizes])


@pytest.fixture
def ticking(monkeypatch):
    """Every burst reads 1 ms per call (the timer faked, nothing sleeps)."""
    monkeypatch.setattr(timing, "_time_once", lambda fn, device, calls=1: [fn() for _ in range(calls)] and 1.0)


def test_the_session_runs_in_the_requested_torch_thread_count_and_restores_it(ticking):
    before, wanted = torch.get_num_threads(), other_threads()
    seen = []

    def call(x):
        seen.append(torch.get_num_threads())
        return x

    request = TimingRequest.paired("confirm", "cpu", ServingContext(wanted), rounds=4, measure=QUICK)
    session = request.run({"eager": call, "candidate": call}, store())
    assert set(seen) == {wanted} and torch.get_num_threads() == before
    assert session.context.torch_threads == wanted and session.context.process == "driver"
    assert session.describe() == f"cpu with {wanted} torch thread{'s' if wanted != 1 else ''}"
    assert {bs: len(r) for bs, r in session.rounds_ms("candidate").items()} == {1: 4, 2: 4, MIX: 4}


def test_the_figure_over_the_recorded_calls_is_timed_on_passes_in_the_order_recorded(ticking):
    """A confirm session also times passes over every recorded call in the order recorded (sizes interleaved,
    as a serving loop calls them); the speedup over the mix comes from those passes, not from the sizes'."""
    seen = []

    def call(x):
        seen.append(x.shape[0])
        return x

    recorded = store((1, 2, 2, 1))
    confirm = TimingRequest.paired("confirm", "cpu", rounds=2, measure=QUICK)
    assert confirm.mix and not TimingRequest.paired("screen", "cpu", measure=QUICK).mix
    before = len(seen)
    confirm.run({"eager": call}, recorded)
    calls = seen[before:]
    assert [1, 2, 2, 1] * 3 == calls[-12:]   # the last rounds: whole passes, in the recorded order
    # the mix's interval: from the passes where both were timed so (2x), else composed from the sizes (1x)
    by_size = {1: [1.0] * 30, 2: [2.0] * 30}
    eager, candidate = {**by_size, MIX: [6.0] * 30}, {**by_size, MIX: [3.0] * 30}
    overall, per = intervals(eager, candidate, {1: 2, 2: 2}, 0.95)
    assert overall.median == pytest.approx(2.0) and {bs: i.median for bs, i in per.items()} == {1: 1.0, 2: 1.0}
    assert intervals(by_size, by_size, {1: 2, 2: 2}, 0.95)[0].median == pytest.approx(1.0)


def test_rounds_and_context_travel_in_the_request_as_plain_data():
    request = TimingRequest.paired("screen", "cpu", ServingContext(3, "driver"), measure=QUICK)
    assert request.rounds == DEFAULT_ROUNDS["screen"]
    again = TimingRequest.from_dict(request.to_dict())
    assert again == request and again.context.torch_threads == 3 and again.config == QUICK
    assert TimingRequest.alone("baseline", "cpu").mode == "alone"


def test_a_callable_that_changes_the_thread_count_fails_the_session(ticking):
    before, other = torch.get_num_threads(), other_threads()

    def meddling(x):
        torch.set_num_threads(other)
        return x

    with pytest.raises(ThreadsChanged):
        TimingRequest.paired("confirm", "cpu", rounds=2, measure=QUICK).run({"eager": lambda x: x, "bad": meddling},
                                                                            store((1,)))
    torch.set_num_threads(before)


def test_no_code_outside_measure_calls_the_low_level_timer():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "measure" and path.parent.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "aitune_ray.measure.timing":
                offenders += [f"{path.name}: {a.name}" for a in node.names if a.name in LOW_LEVEL]
            if isinstance(node, ast.Attribute) and node.attr in LOW_LEVEL and \
                    isinstance(node.value, ast.Name) and node.value.id == "timing":
                offenders.append(f"{path.name}: timing.{node.attr}")
    assert offenders == []


def test_inline_tuning_times_every_call_in_the_serving_context(sim_clock):
    wanted, before = other_threads(), torch.get_num_threads()
    seen = []

    class Spy(SimAffine):
        def forward(self, x):
            seen.append(torch.get_num_threads())
            return super().forward(x)

    backend = sim("quick", ms=1.0, seed=1)
    module = ait.Module(Spy(ms=2.0, noise=0.02), name="spy",
                        strategy=ait.MaxThroughputStrategy([backend], measure_config=QUICK))
    for bs in (2, 4):
        module(torch.ones(bs, 3))
    seen.clear()
    report = tune_modules([module], device="cpu", executor=InlineExecutor(remeasure_rounds=6, contain=False),
                              serving_threads=wanted).modules[0]
    assert seen and set(seen) == {wanted}      # baseline, screening, confirm and the post-deploy check alike
    assert torch.get_num_threads() == before
    assert report.measured_in == ServingContext(wanted).describe("cpu")
    assert f"measured on cpu with {wanted} torch thread" in answer(report)


def test_serving_threads_must_be_a_positive_int():
    from aitune_ray.api.tuning import serving_context
    from aitune_ray.errors import ConfigError

    assert serving_context(None).torch_threads == torch.get_num_threads()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError):
            serving_context(bad)


DECIDED = {"median": 1.6, "low": 1.5, "high": 1.7}


@pytest.mark.parametrize("checked, checked_in, verdict", [
    ({"median": 1.65, "low": 1.55, "high": 1.8}, "cpu with 2 torch threads", AGREES),
    ({"median": 187.6, "low": 150.0, "high": 210.0}, "cpu with 1 torch thread", CONTEXT_MISMATCH),
    ({"median": 187.6, "low": 150.0, "high": 210.0}, "cpu with 2 torch threads", HOST_UNFIT),
])
def test_a_later_check_is_judged_against_the_decisions_interval(checked, checked_in, verdict):
    found = agreement(DECIDED, checked, "cpu with 2 torch threads", checked_in)
    assert found["verdict"] == verdict
    assert found["text"].startswith(verdict)            # the problem first, never a bare "187x"
    assert "1.6x [1.5, 1.7]" in found["text"]           # beside the decision's own figure


def test_two_narrow_intervals_a_percent_apart_agree_within_the_rules_noise_tolerance():
    decided, checked = {"median": 1.465, "low": 1.46, "high": 1.47}, {"median": 1.495, "low": 1.49, "high": 1.50}
    assert agreement(decided, checked, "cuda", "cuda", tolerance=0.03)["verdict"] == AGREES
    assert agreement(decided, checked, "cuda", "cuda")["verdict"] == HOST_UNFIT          # apart, no tolerance
    assert agreement(DECIDED, {"median": 1.9, "low": 1.8, "high": 2.0}, "cuda", "cuda",
                     tolerance=0.03)["verdict"] == HOST_UNFIT                              # 6% apart


def test_a_decision_timed_in_a_ray_actor_and_a_check_in_the_serving_process_are_two_contexts():
    in_actor = ServingContext(2, "actor").describe("cpu")
    assert in_actor == "cpu with 2 torch threads in a Ray actor"
    assert ServingContext(2, "driver").describe("cpu") == ServingContext(2, "actor").describe("cpu", process=False)
    checked = {"median": 187.6, "low": 150.0, "high": 210.0}
    found = agreement(DECIDED, checked, in_actor, ServingContext(2, "driver").describe("cpu"))
    assert found["verdict"] == CONTEXT_MISMATCH and "another process than the one that serves" in found["text"]
    # the same process kind and threads: what moved is the host
    assert agreement(DECIDED, checked, in_actor, in_actor)["verdict"] == HOST_UNFIT


def test_eager_spread_against_itself_makes_the_host_unfit():
    rounds = 40
    eager = {8: [1.0 + 0.01 * (i % 3) for i in range(rounds)]}
    candidate = {8: [0.5 + 0.01 * (i % 2) for i in range(rounds)]}
    # the control (eager again) reads 1x in half the rounds and 20x in the other half: with a tolerance this
    # wide its interval still holds 1, but no figure of this session holds anywhere
    jumpy = Session(eager=eager, control={8: [e * (1.0 if i % 2 else 20.0) for i, e in enumerate(eager[8])]},
                    candidates={"c": candidate})
    verdict = decide(jumpy, ["c"], {8: 1}, Rule(noise_tolerance=5.0))
    assert verdict.kind == UNFIT_VERDICT and verdict.chosen is None and "quiet host" in verdict.why
    steady = Session(eager=eager, control={8: [e * 1.01 for e in eager[8]]}, candidates={"c": candidate})
    assert decide(steady, ["c"], {8: 1}, Rule(noise_tolerance=5.0)).chosen == "c"


def test_a_ray_actors_sessions_run_in_the_users_thread_count(tmp_path):
    ray = pytest.importorskip("ray")
    from aitune_ray.cluster import RayExecutor
    from tests.ray_helpers import BUSY_HOST, FastBackend, HelperConfig, ThreadSpy

    root = str(pathlib.Path(__file__).resolve().parent.parent)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH"))
                                                                     if p)}})
    try:
        spy = tmp_path / "threads"
        strategy = ait.MaxThroughputStrategy([FastBackend(HelperConfig())], measure_config=QUICK, **BUSY_HOST)
        module = ait.Module(ThreadSpy(str(spy)), name="spy", strategy=strategy)
        with torch.no_grad():
            for bs in (1, 4):
                module(torch.randn(bs, 8))
        spy.unlink()
        executor = RayExecutor(remeasure_rounds=3, max_actors=1, cpus_per_actor=1, warm_up="off", task_timeout_s=120)
        with executor:
            report = tune_modules([module], device="cpu", executor=executor, serving_threads=2).modules[0]
        in_actor = [line.split() for line in spy.read_text().splitlines() if line.split()[0] != str(os.getpid())]
        assert in_actor and {threads for _, threads in in_actor} == {"2"}   # the actor itself has 1
        assert report.measured_in == "cpu with 2 torch threads in a Ray actor"   # where it was timed
    finally:
        ray.shutdown()
