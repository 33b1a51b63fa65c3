"""The job-level schedule: every module's work at once over one actor pool (fake GPUs, builds that wait on
events), and what the schedule's costs estimate."""

from __future__ import annotations

import itertools
import threading
import types

import pytest

ray = pytest.importorskip("ray")

import aitune_ray as ait  # noqa: E402
from aitune_ray.cluster import RayExecutor  # noqa: E402
from aitune_ray.cluster.costs import Costs  # noqa: E402
from aitune_ray.api.module import ModuleState  # noqa: E402
from aitune_ray.decision.verdict import CONFIRM_FAILED  # noqa: E402
from aitune_ray.records.results import ERROR  # noqa: E402
from aitune_ray.api.tuning import tune_modules  # noqa: E402
from tests.ray_helpers import (BUSY_HOST, FastBackend, HelperConfig, HintedBackend, RaisingBackend,  # noqa: E402
                                recorded)
from tests.schedule_helpers import gated, start_turnstile  # noqa: E402
from tests.test_ray_executor import MEASURE, WORKER_PATH  # noqa: E402


def max_throughput(backends):
    return ait.MaxThroughputStrategy(backends, measure_config=MEASURE, **BUSY_HOST)


def ray_init(**kwargs):
    """A Ray of this test's own (address="local": never another one found running on this machine)."""
    ray.init(address="local", include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": WORKER_PATH}}, **kwargs)


@pytest.fixture
def fake_gpus(request):
    ray_init(num_cpus=2, num_gpus=request.param)
    try:
        yield request.param
    finally:
        ray.shutdown()


def tune_in_background(modules, executor) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(tune_modules(modules, executor=executor)), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("fake_gpus", [9], indirect=True)
def test_a_pipeline_of_three_modules_starts_every_module_s_builds_before_any_decision(fake_gpus):
    """3 modules x 3 candidates on 9 GPUs: all nine builds are under way at once (each waits at the turnstile
    until all nine have arrived), so no module decides before every module's builds have started."""
    turnstile = start_turnstile("pipeline")
    events: list[dict] = []
    executor = RayExecutor(task_timeout_s=300, remeasure_rounds=3, cpus_per_actor=0, warm_up="off",
                           progress=events.append)
    names = ["text_encoder", "denoiser", "vae"]
    modules = [recorded(name, max_throughput([gated("pipeline", 10 * i + j) for j in range(3)]))
               for i, name in enumerate(names)]
    try:
        thread, out = tune_in_background(modules, executor)
        arrivals = ray.get(turnstile.wait_count.remote(9), timeout=600)
        assert sorted(tag for tag, _ in arrivals) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
        assert not [e for e in events if e["task"] == "remeasure"]    # no module has begun to decide
        ray.get(turnstile.release.remote())
        thread.join(600)
        (report,) = out
    finally:
        executor.close()
    assert not report.failures
    assert [m.module for m in report.modules] == names
    for module in modules:   # every build ran; the choice itself is the real-time confirm session's call
        assert {r.status for r in module.report.results} == {"ok"}, module.report.decision
        assert module.state == ModuleState.TUNED and (module.backend is None) == (not module.report.chosen)
    started = [i for i, e in enumerate(events) if e["task"] == "build" and e["event"] == "building"]
    decided = [i for i, e in enumerate(events) if e["task"] == "remeasure"]
    assert len(started) == 9 and max(started) < min(decided)
    assert {e["module"] for e in events if e["task"] == "build"} == set(names)


@pytest.mark.parametrize("fake_gpus", [4], indirect=True)
def test_a_module_whose_builds_all_fail_leaves_the_other_modules_decisions_intact(fake_gpus):
    """One module's only build fails (and its strategy raises it) while the others' builds are held under
    way: those go on, and both other modules decide."""
    turnstile = start_turnstile("isolation")

    def progress(event):   # the others' builds go on only once the failing module's build has failed
        if event["module"] == "broken" and event["event"] == "done" and event["task"] == "build":
            turnstile.release.remote()

    executor = RayExecutor(task_timeout_s=300, remeasure_rounds=3, cpus_per_actor=0, warm_up="off",
                           progress=progress)
    broken = recorded("broken", ait.OneBackendStrategy(RaisingBackend(), measure_config=MEASURE))
    others = [recorded(name, max_throughput([gated("isolation", i)])) for i, name in enumerate(["head", "tail"])]
    try:
        thread, out = tune_in_background([broken, *others], executor)
        assert len(ray.get(turnstile.wait_count.remote(2), timeout=600)) == 2   # both held under way
        thread.join(600)
        (report,) = out
    finally:
        executor.close()
    assert broken.state == ModuleState.EAGER
    assert "always fails to build" in report.failures["broken"]
    (failed,) = broken.report.results
    assert failed.status == ERROR
    for module in others:   # each decided on a confirm session of its own; the choice is that real-time session's
        (result,) = module.report.results
        assert result.ok and module.report.verdict["rounds"] > 0, module.report.decision
        assert module.report.verdict["kind"] != CONFIRM_FAILED, module.report.decision
        assert module.state == ModuleState.TUNED   # eager kept by the decision is TUNED, as in AITune
        assert (module.backend is None) == (module.report.chosen != result.key)
    assert set(report.failures) == {"broken"}


def test_costs_start_as_hints_and_turn_into_this_job_s_seconds():
    costly = FastBackend(HelperConfig(tag=1)).spec()
    costs = Costs()
    assert costs.estimate("a", costly) == 1.0                    # FastBackend's build_cost hint
    costs.measured("a", costly, 8.0)
    assert costs.estimate("a", costly) == pytest.approx(8.0)     # this module's own seconds per hint unit
    assert costs.estimate("b", costly) == pytest.approx(8.0)     # the class's measured seconds elsewhere
    other = {"type": "tests.ray_helpers:RaisingBackend", "config": {}}
    costs.measured("b", other, 2.0)
    assert costs.estimate("b", costly) == pytest.approx(2.0)     # b builds 2 s per hint unit
    assert costs.estimate("c", {"type": "no.such:Backend", "config": {}}) == pytest.approx(5.0)   # the job's mean


def test_a_class_measured_elsewhere_keeps_the_spread_of_its_hints():
    """A backend whose hint follows its configuration: in a module with nothing measured yet, a long build of
    that class stays costlier than a short one (seconds per hint unit of the class, not its mean seconds)."""
    long, short = (HintedBackend(HelperConfig(build_s=s)).spec() for s in (6.0, 1.5))
    costs = Costs()
    costs.measured("a", long, 12.0)
    costs.measured("a", short, 3.0)
    assert costs.estimate("b", long) == pytest.approx(12.0)
    assert costs.estimate("b", short) == pytest.approx(3.0)


def test_timing_calls_go_first_then_the_costliest_next_build_of_any_module_each_module_in_its_own_order():
    from aitune_ray.cluster.schedule import Request, in_order

    def build(module: str, group: int, cost: float, seq: int) -> Request:
        return Request("run", (), module, 1.0, name=f"{module}:{cost:g}", cost=cost, group=group, seq=seq)

    waiting = [build("a", 1, 6.0, 1), build("a", 1, 3.0, 2), build("a", 1, 1.5, 3),
               build("b", 2, 1.0, 4), build("b", 2, 9.0, 5),      # FirstWins order: its cheap first choice first
               Request("forge", (), "e", 1.0, name="e:benchmark", urgent=True, seq=8),
               Request("remeasure", (), "c", 1.0, name="c:remeasure", timing=True, seq=9),
               build("d", 4, 4.0, 10), Request("forge", (), "e", 1.0, name="e:original", urgent=True, seq=11)]
    order = []
    while waiting:   # one actor frees up at a time: the first in order takes it
        first = in_order(waiting)[0]
        order.append(first.name)
        waiting.remove(first)
    # the kernel forge's tasks (a plan a build waits for) after timing calls, before any build
    assert order == ["c:remeasure", "e:benchmark", "e:original", "a:6", "d:4", "a:3", "a:1.5", "b:1", "b:9"]


def test_the_kernel_forge_s_tasks_are_the_job_schedule_s_requests_and_a_held_one_lets_a_build_have_the_actor():
    """Three idle actors, three generators of the forge and one build queued: generators leave one actor to
    other work, so two start, the third is held, and the build takes the third actor."""
    from aitune_ray.cluster.forge import RayForgeRunner
    from aitune_ray.cluster.pool import Slot
    from aitune_ray.cluster.schedule import Request, Schedule
    from aitune_ray.kernel_forge.optimizer import FunctionSearch

    class Pool:
        slots = [Slot(i, actor=object(), generation=1, info={"node": "n", "gpu": str(i)}) for i in range(3)]

        def idle(self):
            return [s for s in self.slots if not s.busy]

        def alive(self):
            return list(self.slots)

    class Runner:   # the Ray call itself: a slot is busy from its start
        inflight: dict = {}

        def start(self, slot, method, args, limit_s, **options):
            slot.busy = True
            return types.SimpleNamespace(where=slot.identity(), options=options)

    class Executor:
        task_timeout_s = 60.0

        def __init__(self):
            self.schedule = Schedule.__new__(Schedule)   # its dispatch alone: no Ray, no loop
            self.schedule.pool, self.schedule.runner, self.schedule._timing_on = Pool(), Runner(), {}
            self.schedule._lock, self.schedule._queue = threading.RLock(), []
            self.schedule._seq, self.schedule._front, self.schedule._closed = itertools.count(1), itertools.count(-1, -1), False
            self.schedule.ring = lambda: None

        def open(self):
            pass

        def put(self, value):
            return value

    executor = Executor()
    runner = RayForgeRunner(executor, intent="cpu")
    runner.open(types.SimpleNamespace(generation_timeout=5.0))
    search = FunctionSearch("gelu", [], [], [])
    generators = [runner._request("generate", search, f"g{i}", {}, generator=True) for i in range(3)]
    runner._submit(generators)
    build = Request("run", (), "other", 1.0, name="build")
    executor.schedule.submit(build)
    executor.schedule._dispatch()
    assert [r.state for r in generators] == ["running", "running", "queued"]
    assert build.state == "running"
    started = generators[0].task.options
    assert started["from_dispatch"] and not started["failure_on_timeout"]   # a generator's timeout is no failure


@pytest.mark.parametrize("fake_gpus", [3], indirect=True)
def test_ctrl_c_while_modules_are_tuned_at_once_cancels_every_module_s_work(fake_gpus):
    """Three modules at once: b's build waits until a's and c's (which hang) are under way; Ctrl-C (raised by the
    progress callback) as b's build ends stops all three, kills both hung builds, and leaves every module eager."""
    from tests.ray_helpers import HangingBackend

    turnstile = start_turnstile("ctrl-c")
    started: set[str] = set()

    def progress(event):
        if event["event"] == "building" and event["module"] in ("a", "c"):
            started.add(event["module"])
            if started == {"a", "c"}:
                turnstile.release.remote()
        if event["module"] == "b" and event["event"] == "done" and event["task"] == "build":
            raise KeyboardInterrupt

    executor = RayExecutor(task_timeout_s=300, remeasure_rounds=3, cpus_per_actor=0, warm_up="off",
                           progress=progress)
    modules = [recorded("a", max_throughput([HangingBackend(HelperConfig(build_s=300))])),
               recorded("b", max_throughput([gated("ctrl-c", 1)])),
               recorded("c", max_throughput([HangingBackend(HelperConfig(build_s=300, tag=1))]))]
    try:
        executor.open()
        generations = sum(s.generation for s in executor.pool.slots)
        with pytest.raises(KeyboardInterrupt):
            tune_modules(modules, executor=executor)
        assert all(m.state == ModuleState.EAGER for m in modules)
        assert sum(s.generation for s in executor.pool.slots) == generations + 2   # both hung builds killed
    finally:
        executor.close()


def test_a_device_that_runs_a_timing_session_takes_no_second_one():
    """On GPUs each actor's GPU is its own device; a module tuned for the CPU times on its node's CPUs, which
    every actor of that node shares."""
    from aitune_ray.cluster.pool import Slot
    from aitune_ray.cluster.schedule import Request, Schedule, device_of

    slots = [Slot(i, actor=object(), generation=1, info={"node_id": "n1", "gpu_ids": [str(i)]}) for i in range(2)]
    schedule = Schedule.__new__(Schedule)   # its choice of a slot alone: no Ray, no loop
    for on_cpu, expected in ((False, slots[1]), (True, None)):
        running = Request("baseline", (), "a", 1.0, timing=True, on_cpu=on_cpu)
        schedule._timing_on = {device_of(slots[0], running): running}
        other = Request("remeasure", (), "b", 1.0, timing=True, on_cpu=on_cpu)
        assert schedule._pick(other, list(slots)) is expected
        build = Request("run", (), "b", 1.0)
        assert schedule._pick(build, list(slots)) is slots[0]   # builds are not timing sessions


def test_the_pool_grows_by_the_room_that_joined_and_its_new_slots_get_work_once_up():
    """grow() adds a slot per actor the cluster has room for beyond the pool's slots (a retired slot still
    counts); a slot it adds is dispatchable once its actor answered, unlike the pool's first ones."""
    from aitune_ray.cluster.pool import ActorPool, Slot

    pool = ActorPool.__new__(ActorPool)   # its bookkeeping alone: no Ray
    pool.closed, pool.num_gpus, pool.listeners, pool._later = False, 1.0, [], []
    pool.lock = threading.RLock()
    spawned = []
    pool._spawn = lambda slot: spawned.append(slot) or setattr(slot, "generation", slot.generation + 1)
    pool.slots = [Slot(0, actor=object(), generation=1, info={"node": "a"}), Slot(1, generation=2)]  # 1: retired
    room = [2]
    pool.sizer = lambda: room[0]
    assert pool.grow() == 0 and len(pool.slots) == 2
    room[0] = 4
    assert pool.grow() == 2 and spawned == pool.slots[2:] and all(s.joined for s in spawned)
    assert [s.index for s in pool.slots] == [0, 1, 2, 3]
    assert pool.slots[0].dispatchable() and not spawned[0].dispatchable()   # not up yet: no work
    spawned[0].info = {"node": "b"}
    assert spawned[0].dispatchable()

    def gone():
        raise RuntimeError("no live node of that kind just now")

    pool.sizer = gone
    assert pool.grow() == 0 and len(pool.slots) == 4
