"""The kernel forge on Ray (CPU, two fake GPUs): the same plan as inline, benchmarks spread over both
actors with each number naming its GPU, a generator timing out on an actor, the interleaved re-measure of
small wins, and KernelSelectorBackend planned by the driver while plain builds go on."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import threading
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import KernelSelectorBackend, KernelSelectorBackendConfig, TorchEagerBackend  # noqa: E402
from aitune_ray.cluster import RayExecutor  # noqa: E402
from aitune_ray.cluster.driver_gpu import DriverGpu  # noqa: E402
from aitune_ray.cluster.forge import Cancelled, RayForgeRunner, RayKernelOptimizer  # noqa: E402
from aitune_ray.kernel_forge import (KernelOptimizer, ProviderBenchmark, SageAttentionKernelProvider,  # noqa: E402
                                     TorchSDPAKernelProvider)
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan  # noqa: E402
from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler  # noqa: E402
from aitune_ray.kernel_forge.runner import LocalRunner  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from tests.forge_helpers import (  # noqa: E402
    Attention, ForgeBlock, GeluNorm, NeverFinishingGenerator, SleepyEagerBackend, TestGeluProvider, TestLayerNormProvider,
    block_samples)
from tests.ray_helpers import HelperConfig  # noqa: E402

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = str(Path(__file__).resolve().parent.parent)
# Workers import this checkout, and whatever the driver could import (a Ray installed on PYTHONPATH).
WORKER_PATH = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
FAST = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_cv=0.1, max_seconds=0.1)



@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=2, num_gpus=2,
             runtime_env={"env_vars": {"PYTHONPATH": WORKER_PATH}})
    ex = RayExecutor(task_timeout_s=60, max_actor_restarts=5, log_dir=str(tmp_path_factory.mktemp("actor-logs")))
    try:
        ex.open()
        ray.get([slot.ready_ref for slot in ex.pool.alive()])
        yield ex
    finally:
        ex.close()
        ray.shutdown()


def actor_gpus(executor) -> set[str]:
    """The GPU identities of the live actors (on CPU: "cpu (Ray GPU 0)" and "cpu (Ray GPU 1)")."""
    slots = executor.pool.alive()
    ray.get([slot.ready_ref for slot in slots])
    return {slot.identity()["gpu"] for slot in slots}


def samples(batches=(4, 4, 2)) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [torch.randn(b, 32, 256, generator=gen) for b in batches]


def providers():
    """Per function a clear winner ("cached": a benchmark repeats its input), a loser and a wrong one."""
    return [TestGeluProvider("slow"), TestGeluProvider("cached"), TestGeluProvider("negated"),
            TestLayerNormProvider("slow"), TestLayerNormProvider("cached")]


def options(**kwargs) -> dict:
    return {"measure": FAST, "final_rounds": 20, "warmup_iterations": 1, **kwargs}


def record(gpu: str, speedup: float, node: str = "n") -> ProviderBenchmark:
    return ProviderBenchmark("gelu", f"p{speedup}", "ok", median_ms=1.0, gpu=gpu, node=node, speedup=speedup)


# ----- the decision rule (no Ray) -------------------------------------------------------------------------

@pytest.fixture(params=["inline", "ray"])
def where(request):
    """Each test that takes it runs once in this process and once on the Ray actors."""
    return request.param


def forge_runner(where: str, request):
    return LocalRunner() if where == "inline" else RayForgeRunner(request.getfixturevalue("executor"))


def replayed_choice(plan, function: str) -> str | None:
    """The one decision applied again to the records a plan keeps: the finalist whose confirm-session
    judgement was accepted with the highest median."""
    records = [ProviderBenchmark.from_dict(r) for r in plan.results if r["function"] == function]
    judged = [r for r in records if r.source != "original" and r.remeasured and r.remeasured.get("verdict") == "faster"]
    best = max(judged, key=lambda r: r.remeasured["speedup"], default=None)
    return best.description if best is not None else None


def test_inline_and_ray_choose_providers_by_the_same_rule(where, request):
    model, data = GeluNorm().eval(), samples()
    plan = KernelOptimizer(providers(), runner=forge_runner(where, request), **options()).make_plan(model, data)
    expected = {"gelu": "test gelu cached", "layer_norm": "test layer_norm cached"}
    assert plan.functions == expected
    for function, chosen in expected.items():
        assert replayed_choice(plan, function) == chosen
    selected = [r for r in plan.results if r["selected"]]
    assert sorted(r["description"] for r in selected) == sorted(expected.values())
    assert all(r["gpu"] for r in plan.results if r["status"] == "ok")


def test_same_plan_inline_and_on_ray_with_every_number_naming_its_gpu(executor):
    model, data = GeluNorm().eval(), samples()
    inline = KernelOptimizer(providers(), **options()).make_plan(model, data)
    on_ray = RayKernelOptimizer(providers(), executor=executor, **options()).make_plan(model, data)

    expected = {"gelu": "test gelu cached", "layer_norm": "test layer_norm cached"}
    assert inline.functions == expected
    assert on_ray.functions == expected
    json.dumps(on_ray.to_dict())

    gpus = actor_gpus(executor)
    assert len(gpus) == 2
    candidates = [r for r in on_ray.results if r["source"] == "provider"]
    assert len(candidates) == 5
    assert {r["gpu"] for r in candidates} == gpus  # the pairs were spread over both actors
    assert all(r["node"] for r in on_ray.results)
    by_name = {(r["function"], r["description"]): r for r in candidates}
    assert by_name[("gelu", "test gelu negated")]["status"] == "rejected"
    winner = by_name[("gelu", "test gelu cached")]
    assert winner["selected"] and winner["speedup"] > 1.0
    # Each winner's speedup is against the original timed on its own GPU.
    originals = [r for r in on_ray.results if r["source"] == "original"]
    for fn in ("gelu", "layer_norm"):
        chosen = next(r for r in candidates if r["function"] == fn and r["selected"])
        assert any(o["function"] == fn and o["gpu"] == chosen["gpu"] for o in originals)
    assert {o["gpu"] for o in originals} <= gpus


def test_a_generator_that_never_finishes_times_out_and_provider_results_are_kept(executor):
    generations = {slot.index: slot.generation for slot in executor.pool.slots}
    opt = RayKernelOptimizer([TestGeluProvider("cached"), TestLayerNormProvider("cached")],
                             [NeverFinishingGenerator()], executor=executor, generator_min_time_share_percent=0.0,
                             generation_timeout=1.5, **options())
    plan = opt.make_plan(GeluNorm().eval(), samples())

    assert plan.functions == {"gelu": "test gelu cached", "layer_norm": "test layer_norm cached"}
    timed_out = [r for r in plan.results if r["source"] == "generator:NeverFinishingGenerator"]
    assert sorted(r["function"] for r in timed_out) == ["gelu", "layer_norm"]
    for r in timed_out:
        assert r["status"] == "timed out" and "killed and replaced" in r["error"], r
        assert 1.5 <= r["seconds"] < 30
    assert [o.status for o in opt.outcomes] == ["timed out", "timed out"]
    replaced = sum(slot.generation - generations[slot.index] for slot in executor.pool.slots)
    assert replaced == 2
    assert all(slot.restarts == 0 for slot in executor.pool.slots)  # a generator's timeout is no failure


def test_a_cancelled_search_stops_and_frees_its_actors(executor):
    before = {slot.index: (slot.generation, slot.restarts) for slot in executor.pool.slots}
    opt = RayKernelOptimizer([TestGeluProvider("cached")], [NeverFinishingGenerator()], executor=executor,
                             generator_min_time_share_percent=0.0, generation_timeout=600.0, **options())
    profiled = opt.profile_functions(GeluNorm().eval(), samples())
    timer = threading.Timer(1.0, opt.cancel)
    timer.start()
    with pytest.raises(Cancelled):
        opt.search(profiled)
    timer.join()
    after = {slot.index: (slot.generation, slot.restarts) for slot in executor.pool.slots}
    assert sum(after[i][0] - before[i][0] for i in after) >= 1   # the generator's actor was replaced
    assert all(after[i][1] == before[i][1] for i in after)       # and that is no failure
    assert not executor.schedule.queued() and all(not s.busy for s in executor.pool.slots)


def test_every_kept_provider_is_confirmed_beside_the_original_on_one_gpu(executor):
    opt = RayKernelOptimizer([TestGeluProvider("cached"), TestGeluProvider("slow")], executor=executor,
                             **options(final_rounds=7))
    plan = opt.make_plan(GeluNorm().eval(), samples())
    assert plan.functions == {"gelu": "test gelu cached"}
    chosen = next(r for r in plan.results if r["selected"])
    again = chosen["remeasured"]
    assert again is not None and again["rounds"] == 7 and again["gpu"] in actor_gpus(executor)
    assert again["verdict"] == "faster" and again["interval"]["low"] >= 1.01 and again["raw_speedup"] > 1.0
    assert chosen["speedup"] == again["speedup"] and set(again["intervals"]) == {0, 1}   # at each recorded shape
    # the slow provider is a finalist too (K=2): judged in the same session, not kept
    slow = next(r for r in plan.results if r["description"] == "test gelu slow")
    assert slow["remeasured"]["gpu"] == again["gpu"] and slow["remeasured"]["verdict"] != "faster"
    assert again["finalists"] == slow["remeasured"]["finalists"] == 2


# ----- KernelSelectorBackend through RayExecutor -----------------------------------------------------------

def test_kernel_selector_plans_on_the_driver_while_plain_builds_run_then_builds_on_an_actor(executor):
    events = []
    executor.progress = events.append
    config = KernelSelectorBackendConfig(kernel_providers=[TestGeluProvider("cached"), TestGeluProvider("slow")],
                                         measure=FAST.to_dict(), final_rounds=5)
    selector = KernelSelectorBackend(config, TorchEagerBackend())
    sleepy = SleepyEagerBackend(HelperConfig(build_s=2.0))
    strategy = ait.MaxThroughputStrategy([selector, sleepy], measure_config=FAST)
    model = ait.Module(GeluNorm().eval(), "gelu_norm", strategy=strategy)
    try:
        ait.tune(model, samples(), executor=executor, call_as_given=True)
    finally:
        executor.progress = None

    results = {r.key: r for r in model.report.results}
    built = results[selector.key()]
    assert built.ok, built.error
    # the plan (made on the driver) travels in the spec and is what the actor built: whether the cached
    # provider is planned is the real-time confirm session's call (a busy host may keep the original)
    assert built.state["kernel_plan"]["providers"] == built.spec["kernel_plan"]["providers"]
    assert [p["behavior"] for p in built.spec["kernel_plan"]["providers"]] in ([], ["cached"])
    assert {r["gpu"] for r in built.spec["kernel_plan"]["results"]} <= actor_gpus(executor)
    assert results[sleepy.key()].ok

    # The plain build started before the composite's (which waited for its plan) ...
    order = [(e["key"], e["event"]) for e in events]
    assert order.index((selector.key(), "planning")) < order.index((sleepy.key(), "building")) \
        < order.index((selector.key(), "building"))
    # ... and the actor built the composite from the plan in its spec, without profiling.
    log = Path(built.log_path).read_text()
    assert "using the kernel plan made before the build" in log
    assert "kernel profile" not in log


def test_with_a_kernel_plan_pending_the_baseline_slot_is_kept_so_one_gpu_times_eager_on_the_driver(executor,
                                                                                                     monkeypatch):
    """On one local GPU the driver times eager while the actor starts (DriverGpu.times, which needs
    CUDA: granted here), once submit_early() kept the actor for the baseline. A batch with a kernel plan
    pending keeps that actor too, so its eager baseline is also timed on the driver."""
    monkeypatch.setattr(DriverGpu, "times", lambda self, context: True)
    events = []
    executor.progress = events.append
    config = KernelSelectorBackendConfig(kernel_providers=[TestGeluProvider("cached")], measure=FAST.to_dict(),
                                         final_rounds=5)
    strategy = ait.MaxThroughputStrategy([KernelSelectorBackend(config, TorchEagerBackend())], measure_config=FAST)
    model = ait.Module(GeluNorm().eval(), "gelu_norm", strategy=strategy)
    try:
        ait.tune(model, samples(), executor=executor, call_as_given=True)
    finally:
        executor.progress = None
    baseline = [e for e in events if e.get("task") == "baseline" and e["event"] == "done"]
    assert [str(e["gpu"]).startswith("driver") for e in baseline] == [True], baseline
    assert model.report.results[0].ok, model.report.results[0].error


def test_kernel_selector_jobs_with_one_selection_config_share_one_plan(where, request, monkeypatch):
    """Two KernelSelector candidates around different delegates, one selection config: the module is
    profiled once, and both composites build from the same plan; a third with another config gets its own.
    The same inline and on Ray."""
    profiled = []
    profile = KernelOptimizer.profile_functions

    def counting(self, *args, **kwargs):
        profiled.append(self)
        return profile(self, *args, **kwargs)

    monkeypatch.setattr(KernelOptimizer, "profile_functions", counting)
    # 10 rounds: with 3, a 97.5% interval of the median is the whole range of 3 ratios (75% confidence), and
    # the A/A control's then misses 1 +- 3% on a loaded host in about a quarter of plans
    config = KernelSelectorBackendConfig(kernel_providers=[TestGeluProvider("cached"), TestGeluProvider("slow")],
                                         measure=FAST.to_dict(), final_rounds=10)
    other = KernelSelectorBackendConfig(kernel_providers=[TestGeluProvider("slow")], measure=FAST.to_dict(),
                                        final_rounds=10)
    shared = [KernelSelectorBackend(config, TorchEagerBackend()),
              KernelSelectorBackend(config, SleepyEagerBackend(HelperConfig(build_s=0.0)))]
    alone = KernelSelectorBackend(other, TorchEagerBackend())
    strategy = ait.MaxThroughputStrategy([*shared, alone], measure_config=FAST)
    model = ait.Module(GeluNorm().eval(), "gelu_norm_shared", strategy=strategy)
    executor = ait.InlineExecutor(remeasure_rounds=0) if where == "inline" else request.getfixturevalue("executor")
    ait.tune(model, samples(), device="cpu", executor=executor, call_as_given=True)

    assert len(profiled) == 2            # one profile per selection config, not one per candidate
    results = {r.key: r for r in model.report.results}
    first, second = (results[b.key()] for b in shared)
    assert first.ok and second.ok, (first.error, second.error)
    assert first.state["kernel_plan"] == second.state["kernel_plan"]
    assert [p["behavior"] for p in first.state["kernel_plan"]["providers"]] == ["cached"]
    assert results[alone.key()].state["kernel_plan"]["providers"] == []


class _RecordingProfiler(ModuleFunctionKernelProfiler):
    seen: list = []

    def profile(self, *args, **kwargs):
        _RecordingProfiler.seen.append(kwargs.get("teardown_cupti"))
        return super().profile(*args, **kwargs)


def test_a_ray_driver_profiles_without_cuptis_teardown_and_one_process_with_it():
    """Kineto's CUPTI teardown makes a process that is also Ray's driver hang at exit (docs/measurement.md): the Ray
    runner's profile keeps CUPTI attached; the in-process runner's detaches it."""
    _RecordingProfiler.seen = []
    x = block_samples((2,))
    for runner in (RayForgeRunner(executor=None), LocalRunner()):
        KernelOptimizer([TestGeluProvider()], runner=runner,
                        kernel_profiler_factory=_RecordingProfiler).profile_functions(ForgeBlock().eval(), x)
    assert _RecordingProfiler.seen == [False, True]


# ----- GPU (device machine) ------------------------------------------------------------------------------------

EXITS = """
import torch, aitune_ray as ait
from aitune_ray.backend import KernelSelectorBackend
from aitune_ray.cluster import RayExecutor
from tests.forge_helpers import Attention
q, k, v = (torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.half) for _ in range(3))
module = ait.Module(Attention().cuda().eval(), name="attention",
                    strategy=ait.MaxThroughputStrategy([KernelSelectorBackend()]))
ait.tune(lambda *a: module(*a), [(q, k, v)], device="cuda", executor=RayExecutor(max_actors=1), call_as_given=True)
from aitune_ray.measure.conditions import cupti_attached
print("tuned; CUPTI attached here:", cupti_attached(), flush=True)
"""


@pytest.mark.gpu
def test_a_ray_driver_that_profiled_on_its_gpu_exits_when_done(tmp_path):
    """KernelSelector on Ray profiles for its plan in a child of the driver, so the driver keeps no CUPTI, and
    exits once tune() returned."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": WORKER_PATH, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run([sys.executable, "-c", EXITS], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert "tuned; CUPTI attached here: False" in proc.stdout, (proc.stdout[-500:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.gpu
def test_gpu_sdpa_providers_benchmarked_on_both_gpus(executor):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    gpus = actor_gpus(executor)
    assert not any(g.startswith("cpu") for g in gpus), gpus
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 16, 1024, 64, generator=gen).cuda().half() for _ in range(3))
    model = Attention().cuda().eval()
    providers = [TorchSDPAKernelProvider(b) for b in ("flash", "cudnn", "efficient")] + [SageAttentionKernelProvider()]
    plan = RayKernelOptimizer(providers, executor=executor, final_rounds=20).make_plan(model, [((q, k, v), {})])
    sdpa = [r for r in plan.results if r["source"] == "provider"]
    assert any(r["status"] == "ok" for r in sdpa), sdpa
    assert {r["gpu"] for r in sdpa} == gpus
    for r in sdpa:
        assert r["status"] in ("ok", "unsupported", "rejected", "error"), r
        if r["selected"]:
            assert r["max_error"] <= r["tolerance"] and r["speedup"] > 1.0
    with plan.apply(model):
        out = model(q, k, v)
    assert torch.isfinite(out).all()


# ----- the benchmark script --------------------------------------------------------------------------------

def test_kernel_forge_benchmark_runs_on_cpu(tmp_path, capsys):
    path = Path(ROOT) / "benchmarks" / "kernel_forge.py"
    spec = importlib.util.spec_from_file_location("kernel_forge_benchmark", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "kernel_forge.md"
    assert script.main(["--device", "cpu", "--shapes", "1,2,32,16,causal", "--out", str(out)]) == 0
    table = out.read_text()
    assert "| shape (B,H,S,D) | default ms | flash ms (rel. err) |" in table
    row = next(line for line in table.splitlines() if line.startswith("| 1,2,32,16,causal |"))
    assert row.count("unavailable") == 4   # cuDNN, efficient, SageAttention and FlashAttention-4 need CUDA
    assert "SageAttention: unsupported" in table and row.endswith("| no |")
    rows = json.loads(out.with_suffix(".json").read_text())["result"]
    assert rows[0]["providers"]["flash"]["status"] == "ok" and rows[0]["speedup"] > 0


def _plan_run(monkeypatch, planner, *, shares: bool = False, cuda: bool = False):
    """A PlanRun without Ray: its backend class gives planner; its executor's actors share their GPU or not;
    cuda: its profile counts as a CUDA trace (a stand-in child process, never started)."""
    from aitune_ray.cluster import forge as forge_module
    from aitune_ray.cluster.forge import PlanRun
    from aitune_ray.worker.seam import TuneContext
    from aitune_ray.records.results import CandidateJob
    from aitune_ray.model.samples import SampleStore

    class Planned:
        @classmethod
        def planner(cls, spec, runner):
            return planner

    class Executor:
        @staticmethod
        def actors_share_gpus():
            return shares

    class Child:
        def __init__(self, device):
            pass

        def close(self):
            pass

    monkeypatch.setattr(forge_module, "backend_class_of", lambda spec: Planned)
    monkeypatch.setattr(forge_module, "uses_cuda", lambda module, samples: cuda)
    monkeypatch.setattr(forge_module, "ProfileChild", Child)
    context = TuneContext(name="gelu_norm", module=GeluNorm().eval(), samples=SampleStore(),
                          device=torch.device("cpu"))
    return PlanRun(Executor(), context, [CandidateJob(key="k", spec={"type": "Planned"})])


def test_a_plan_cancelled_while_the_driver_profiles_ends_without_a_search_or_an_error(monkeypatch):
    """No Ray session: PlanRun with a stand-in planner whose profile blocks until the test lets it go. The plan
    is cancelled while profiling (it profiles on a thread of its own); once the profile returns, the run ends:
    no search, no error, nothing to build."""
    profiling, release, searched = threading.Event(), threading.Event(), []

    class Planner:
        def profile(self, module, samples):
            profiling.set()
            release.wait(timeout=60)

        def search(self):
            searched.append(True)

        def cancel(self):
            pass

    run = _plan_run(monkeypatch, Planner())
    run.start()
    assert profiling.wait(timeout=60)
    run.cancel()
    release.set()
    assert run.done.wait(timeout=60) and run.ready.is_set()
    assert searched == [] and run.error is None and run.outcome() == []


@pytest.mark.parametrize("shares, cuda, turn", [(True, True, True), (False, True, False), (True, False, False)])
def test_the_drivers_cuda_profile_holds_a_builds_turn_at_its_gpu_only_beside_actors_that_share_it(
        monkeypatch, shares, cuda, turn):
    """No Ray session: the plan's profile runs inside a build's turn at the module's GPU when it traces CUDA
    and the actors share their GPU (their timings then wait for it, their builds do not); otherwise its turns
    are the no-op ones. turns_for is a stand-in that records what it was asked for."""
    from aitune_ray.cluster import forge as forge_module
    from aitune_ray.runtime.device import module_device

    asked, inside = [], []

    class Turns:
        held = False

        @contextlib.contextmanager
        def building(self):
            Turns.held = True
            yield
            Turns.held = False

    def turns_for(device, shared):
        asked.append((torch.device(device), shared))
        return Turns()

    class Planner:
        def profile(self, module, samples):
            inside.append(Turns.held)

        def search(self):
            return KernelOptimizationPlan()

        def cancel(self):
            pass

    monkeypatch.setattr(forge_module, "turns_for", turns_for)
    run = _plan_run(monkeypatch, Planner(), shares=shares, cuda=cuda)
    run.start()
    assert run.done.wait(timeout=60) and run.error is None
    assert asked == [(module_device(run.context.module), turn)] and inside == [True]
