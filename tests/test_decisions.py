"""Whole tunings through the real strategies, executors and decision procedure: backends of known, noisy
speed on a simulated clock (deterministic on any machine), the batch-size dispatch, memory held by tied
candidates, a failed confirm session, and eager against itself on a real busy CPU."""

import multiprocessing

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend
from aitune_ray.backend.torch_eager import TorchEagerBackend
from aitune_ray.cluster import InlineExecutor
from aitune_ray.decision import CONFIRM_FAILED, FASTER, HOST_UNFIT, INCONCLUSIVE, NOT_FASTER, SLOWER, Session
from aitune_ray.measure import timing
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.model.samples import SampleStore
from aitune_ray.testing import LIVE_BUFFERS, SIM_CALLS, SimAffine, SimBackend, reset, sim

SIM_MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=10, max_seconds=5.0, latency_runs=3)
SKEWED = dict(ms_by_bs={8: 3.0, 32: 4.0}, noise=0.02)         # eager: 2 ms at bs 8, 8 ms at bs 32
STEADY = dict(ms_by_bs={8: 1.5, 32: 6.0}, noise=0.02)
EAGER = dict(ms_by_bs={8: 2.0, 32: 8.0}, noise=0.02)


@pytest.fixture(autouse=True)
def _on_the_sim_clock(sim_clock):   # tests/conftest.py: every test here on the simulated clock
    yield sim_clock


def recorded(strategy, batch_sizes=(8, 32), **eager):
    module = ait.Module(SimAffine(**eager), name="sim", strategy=strategy)
    for i, bs in enumerate(batch_sizes):
        module(torch.full((bs, 3), float(i + 1)))
    return module


STRATEGIES = {"one": lambda bs: ait.OneBackendStrategy(bs[0], measure_config=SIM_MEASURE),
              "first": lambda bs: ait.FirstWinsStrategy(bs, measure_config=SIM_MEASURE),
              "max": lambda bs: ait.MaxThroughputStrategy(bs, measure_config=SIM_MEASURE),
              "min": lambda bs: ait.MinLatencyStrategy(bs, measure_config=SIM_MEASURE),
              "budget": lambda bs: ait.LatencyBudgetStrategy(1000.0, bs, measure_config=SIM_MEASURE)}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_one_point_four_x_backend_is_chosen_by_every_strategy(strategy):
    for seed in range(2):
        backend = sim("quick", ms=2.0 / 1.4, seed=seed)
        module = recorded(STRATEGIES[strategy]([backend]), ms=2.0, seed=100 + seed)
        report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=30))
        assert report.chosen == backend.key(), report.decision
        verdict = report.verdicts[backend.key()]
        assert verdict["verdict"] == FASTER and verdict["interval"]["paired"] and verdict["interval"]["rounds"] == 30
        assert 1.25 < verdict["mix_speedup"] < 1.55 and verdict["interval"]["low"] >= 1.01
        assert report.verdict["kind"] == FASTER and report.verdict["control"]["interval"]["median"] == pytest.approx(1.0, abs=0.05)
        assert report.chosen_result().screen["rounds"] > 0          # screened right after its build
        assert report.deploy_checks[-1]["verdict"] == "timed"       # the post-deploy timing: information
        assert isinstance(module.backend, SimBackend)


def test_a_one_percent_backend_under_ten_percent_noise_keeps_eager():
    for seed in range(4):
        backend = sim("marginal", ms=2.0 / 1.01, seed=seed)
        module = recorded(ait.MaxThroughputStrategy([backend], measure_config=SIM_MEASURE), ms=2.0, seed=200 + seed)
        report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=30))
        assert report.chosen is None and module.backend is None
        assert report.verdict["kind"] in (INCONCLUSIVE, NOT_FASTER)
        assert report.decision.startswith("kept eager")


def test_first_wins_takes_the_first_accepted_in_priority_order():
    slow, quick, quicker = sim("slow", ms=2.5, seed=1), sim("quick", ms=1.5, seed=2), sim("quicker", ms=1.0, seed=3)
    module = recorded(ait.FirstWinsStrategy([slow, quick, quicker], measure_config=SIM_MEASURE), ms=2.0)
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=30))
    assert report.chosen == quick.key(), report.decision
    # the slower one was pruned by its screening or judged not faster, and K counts all three candidates
    assert report.verdict["finalists"] == 3 and report.verdict["confidence"] == pytest.approx(1 - 0.05 / 3)
    assert quicker.key() not in {r.key for r in report.results} or report.chosen != quicker.key()


def test_a_backend_faster_at_one_size_and_slower_at_another_is_never_the_whole_modules():
    skewed, steady = sim("skewed", **SKEWED), sim("steady", **STEADY)
    module = recorded(ait.MaxThroughputStrategy([skewed, steady], measure_config=SIM_MEASURE), **EAGER)
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=20))
    assert report.chosen == steady.key()
    assert report.verdicts[skewed.key()]["verdict"] == SLOWER
    alone = recorded(ait.OneBackendStrategy(sim("skewed", **SKEWED), measure_config=SIM_MEASURE), **EAGER)
    assert alone.tune(device="cpu").chosen is None and alone.state == ait.ModuleState.TUNED


def test_with_dispatch_each_size_goes_to_its_winner_and_the_dispatch_checkpoints(tmp_path):
    skewed, steady = sim("skewed", **SKEWED), sim("steady", **STEADY)
    strategy = ait.MaxThroughputStrategy([skewed, steady], measure_config=SIM_MEASURE, dispatch_by_batch_size=True)
    module = recorded(strategy, **EAGER)
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=20))
    assert report.dispatch == {8: steady.key(), 32: skewed.key()}
    assert isinstance(module.backend, BatchDispatchBackend) and report.chosen.startswith("BatchDispatchBackend")
    assert "bs 8: SimBackend" in report.decision and report.verdicts[report.chosen]["verdict"] == FASTER
    assert report.verdicts[report.chosen]["mix_speedup"] > report.speedups[steady.key()]
    SIM_CALLS.clear()
    for bs in (3, 8, 20, 32, 40):
        assert torch.equal(module(torch.ones(bs, 3)), torch.full((bs, 3), 3.0))
    assert SIM_CALLS == {"infer:steady:3": 1, "infer:steady:8": 1, "infer:skewed:20": 1, "infer:skewed:32": 1,
                         "infer:skewed:40": 1}
    assert "dispatch" in report.markdown().lower()
    path = ait.save(module, tmp_path / "dispatch.ait")
    fresh = ait.Module(SimAffine(**EAGER), name="sim")
    ait.load(fresh, path)
    assert isinstance(fresh.backend, BatchDispatchBackend)
    assert fresh.backend.config.routes == {8: steady.key(), 32: skewed.key()}
    assert set(fresh.backend.members) == {steady.key(), skewed.key()}   # what it routes to, restored
    SIM_CALLS.clear()
    fresh(torch.ones(8, 3)), fresh(torch.ones(32, 3))
    assert SIM_CALLS == {"infer:steady:8": 1, "infer:skewed:32": 1}


def test_with_dispatch_a_lone_skewed_backend_serves_only_its_winning_size():
    skewed = sim("skewed", **SKEWED)
    strategy = ait.MaxThroughputStrategy([skewed], measure_config=SIM_MEASURE, dispatch_by_batch_size=True)
    module = recorded(strategy, **EAGER)
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=20))
    assert report.dispatch == {8: None, 32: skewed.key()}
    SIM_CALLS.clear()
    module(torch.ones(8, 3)), module(torch.ones(32, 3))
    assert SIM_CALLS == {"infer:eager:8": 1, "infer:skewed:32": 1}


class FailingConfirm(InlineExecutor):
    def confirm(self, context, results):
        return Session.failure("RuntimeError: the device was lost")


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_confirm_session_that_fails_keeps_eager_and_says_why(strategy):
    module = recorded(STRATEGIES[strategy]([sim("quick", ms=1.0)]), ms=2.0)
    report = module.tune(device="cpu", executor=FailingConfirm(remeasure_rounds=20))
    assert report.chosen is None and module.backend is None
    assert report.verdict["kind"] == CONFIRM_FAILED and "device was lost" in report.decision


def test_the_verdict_reaches_the_checkpoint_and_the_report_as_plain_data(tmp_path):
    import json
    import zipfile

    from aitune_ray.report.tables import module_report

    module = recorded(ait.MaxThroughputStrategy([sim("quick", ms=1.0)], measure_config=SIM_MEASURE), ms=2.0)
    report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=20))
    again = module_report(json.loads(json.dumps(report.to_dict())))
    assert again.verdict["kind"] == FASTER and again.verdict["chosen"] == report.chosen
    assert again.decision == report.decision and "K=1" in again.decision
    path = ait.save(module, tmp_path / "sim.ait")
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(next(n for n in archive.namelist() if n.endswith(".json"))))
    (entry,) = manifest["modules"]
    assert entry["verdict"]["kind"] == FASTER and entry["verdict"]["chosen"] == report.chosen
    fresh = ait.load(ait.Module(SimAffine(ms=2.0), name="sim"), path)
    assert isinstance(fresh.backend, SimBackend)


# ----- memory: what is held does not grow with the candidates ------------------------------------------

BUFFER = 300 << 20


def peak_of(tied: int, max_finalists: int) -> int:
    reset()
    backends = [sim(f"tied{i}", ms=1.0, noise=0.02, seed=i, buffer_bytes=BUFFER) for i in range(tied)]
    strategy = ait.MaxThroughputStrategy(backends, measure_config=SIM_MEASURE, max_finalists=max_finalists)
    module = recorded(strategy, ms=2.0)
    module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=10))
    return LIVE_BUFFERS.peak


def test_tied_candidates_do_not_grow_the_peak_of_held_builds():
    # the peak is the finalists plus the build under way: it stays at max_finalists + 1 buffers whatever
    # the number of candidates (and at 1 finalist, 8 tied candidates peak as 2 do)
    assert peak_of(8, 3) == peak_of(4, 3) == 4 * BUFFER
    assert peak_of(8, 1) <= 1.3 * peak_of(2, 1)


# ----- a real busy CPU: eager against itself -------------------------------------------------------------


def _spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def test_on_a_busy_cpu_torch_eager_is_never_deployed_as_faster(sim_clock):
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    busy = [context.Process(target=_spin, args=(stop,), daemon=True) for _ in range(3)]
    for p in busy:
        p.start()
    try:
        with timing.use_clock(timing.time.perf_counter):   # the real clock: the host is what is tested
            for seed in range(2):
                torch.manual_seed(seed)
                net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
                measure = MeasureConfig(warmup_runs=2, min_runs=3, max_runs=5, max_seconds=0.5, cpu_burst_ms=2.0,
                                        latency_runs=0)
                strategy = ait.MaxThroughputStrategy([TorchEagerBackend()], measure_config=measure,
                                                     deploy_check_rounds=0)
                module = ait.Module(net, name="mlp", strategy=strategy)
                for bs in (1, 16):
                    module(torch.randn(bs, 64))
                report = module.tune(device="cpu", executor=InlineExecutor(remeasure_rounds=20))
                assert report.chosen is None and module.backend is None, report.decision
                assert report.verdict["kind"] in (HOST_UNFIT, INCONCLUSIVE, NOT_FASTER) or report.verdict["pruned"]
    finally:
        stop.set()
        for p in busy:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# ----- the dispatch backend itself ------------------------------------------------------------------------


def test_a_dispatch_routes_keyword_calls_by_their_tensor_and_names_a_member_that_is_not_active(tmp_path):
    from aitune_ray.errors import BuildError

    small, large = sim("small", ms=1.0, noise=0.0), sim("large", ms=1.0, noise=0.0)
    for index, backend in enumerate((small, large)):
        backend.build(SimAffine(), SampleStore(), torch.device("cpu"), tmp_path / str(index))
    dispatch = BatchDispatchBackend.assemble(SimAffine(), {"s": small, "l": large}, {8: "s", 32: "l"},
                                             torch.device("cpu"))
    SIM_CALLS.clear()
    dispatch.infer(x=torch.ones(5, 3))             # no positional tensor: the first tensor among the keywords
    dispatch.infer(torch.ones(20, 3))
    assert SIM_CALLS == {"infer:small:5": 1, "infer:large:20": 1}
    large.deactivate()
    with pytest.raises(BuildError, match="inactive"):
        dispatch.infer(torch.ones(32, 3))


class ElsewhereBackend(SimBackend):
    """A backend whose infer() says it runs elsewhere, as a DetachedBackend does on a driver without the GPU."""

    def infer(self, *args, **kwargs):
        from aitune_ray.errors import BuildError

        raise BuildError("runs on another machine")


def test_a_dispatch_asks_a_member_with_an_infer_of_its_own_through_it(tmp_path):
    # as a DetachedBackend on a driver without the GPU: its infer() says where the build can run
    from aitune_ray.errors import BuildError

    member = ElsewhereBackend(sim("away").config)
    member.build(SimAffine(), SampleStore(), torch.device("cpu"), tmp_path)
    dispatch = BatchDispatchBackend.assemble(SimAffine(), {"a": member}, {8: "a"}, torch.device("cpu"))
    with pytest.raises(BuildError, match="another machine"):
        dispatch.infer(torch.ones(8, 3))
