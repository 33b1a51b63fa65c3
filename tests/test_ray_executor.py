"""RayExecutor on CPU: fake GPUs on one node, and a two-node cluster, with user backends for faults."""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig  # noqa: E402
from aitune_ray.cluster import InlineExecutor, RayExecutor, TuneContext  # noqa: E402
from aitune_ray.cluster.driver_gpu import DriverGpu  # noqa: E402
from aitune_ray.cluster.session import RaySession  # noqa: E402
from aitune_ray.records import artifacts  # noqa: E402
from aitune_ray.measure.timing import MIX  # noqa: E402
from aitune_ray.errors import ConfigError  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from aitune_ray.api.module import ModuleState  # noqa: E402
from aitune_ray.records.results import CRASHED, ERROR, OK, OOM, TIMED_OUT, BuildResult  # noqa: E402
from tests.ray_helpers import (  # noqa: E402
    BUSY_HOST,
    recorded,
    FastBackend,
    HangingBackend,
    HeldConfig,
    HeldCountBackend,
    HelperConfig,
    OomBackend,
    RaisingBackend,
    SegfaultBackend,
    SlowNet,
    WeightsAotBackend,
)

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = str(Path(__file__).resolve().parent.parent)
# Workers import this checkout, and whatever the driver could import (a Ray installed on PYTHONPATH).
WORKER_PATH = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)


def max_throughput(backends, **kwargs):
    return ait.MaxThroughputStrategy(backends, measure_config=MEASURE, **{**BUSY_HOST, **kwargs})


def fast(**config) -> FastBackend:
    return FastBackend(HelperConfig(**config))


def ray_init(**kwargs):
    ray.init(include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": WORKER_PATH}},
             **kwargs)


class TestOneNode:
    """One Ray instance with two fake GPUs: two tuner actors, each with its own GPU identity."""

    @pytest.fixture(scope="class")
    def executor(self, tmp_path_factory):
        ray_init(num_cpus=2, num_gpus=2)
        ex = RayExecutor(task_timeout_s=6, remeasure_rounds=5, max_actor_restarts=5,
                         log_dir=str(tmp_path_factory.mktemp("actor-logs")))
        try:
            ex.open()
            yield ex
        finally:
            ex.close()
            ray.shutdown()

    @pytest.mark.parametrize("where", ["inline", "ray"])
    def test_one_backend_raises_the_backends_own_exception_on_either_executor(self, executor, where):
        module = recorded(f"raises-{where}", ait.OneBackendStrategy(RaisingBackend(), measure_config=MEASURE))
        with pytest.raises(RuntimeError, match="always fails to build") as raised:
            module.tune(executor=InlineExecutor() if where == "inline" else executor)
        assert type(raised.value) is RuntimeError      # the build's own error, not a wrapper
        assert module.state == ModuleState.EAGER
        (result,) = module.report.results
        assert result.status == ERROR and "exception" not in result.to_dict()

    @pytest.mark.parametrize("where", ["inline", "ray"])
    def test_the_re_measure_times_with_the_strategys_measure_config_on_either_executor(self, executor, where):
        """A strategy's burst length reaches the side-by-side re-measure, on the worker of either path: one
        call per burst here, where the default's 5 ms bursts hold many calls of these sub-millisecond ones."""
        single_calls = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2, cpu_burst_ms=0.0)
        strategy = ait.MaxThroughputStrategy([fast(tag=31), fast(tag=32)], measure_config=single_calls)
        module = recorded(f"measure-config-{where}", strategy)
        report = module.tune(executor=InlineExecutor(remeasure_rounds=5) if where == "inline" else executor)
        assert report.remeasured_baseline
        assert {t["calls_per_burst"] for t in report.remeasured_baseline.values()} == {1}
        for r in report.results:
            assert r.remeasured and {t["calls_per_burst"] for t in r.remeasured.values()} == {1}

    def test_a_build_released_on_its_result_is_gone_before_its_actor_builds_the_next(self, executor, tmp_path):
        """One actor, four builds, the first the fastest: MaxThroughput releases each later one as its result
        arrives (out of reach of the best). Each release reaches the actor before its next build, so every
        build after the first begins with only the best one held there (not the best and the one before)."""
        counts = tmp_path / "held.txt"
        delays = [0.0, 0.02, 0.02, 0.02]
        backends = [HeldCountBackend(HeldConfig(tag=i, infer_delay_s=d, count_file=str(counts)))
                    for i, d in enumerate(delays)]
        single = RayExecutor(max_actors=1, gpus_per_actor=0, cpus_per_actor=0)   # beside the class's two actors
        try:
            recorded("held", max_throughput(backends)).tune(executor=single)
        finally:
            single.close()
        held = dict(line.split() for line in counts.read_text().splitlines())
        assert held == {"0": "0", "1": "1", "2": "1", "3": "1"}

    def test_failures_become_results_and_the_survivor_wins(self, executor):
        events = []
        executor.progress = events.append
        strategy = max_throughput([RaisingBackend(), SegfaultBackend(), HangingBackend(HelperConfig(build_s=120)),
                                   OomBackend(), fast()])
        module = recorded("faults", strategy)
        started = time.monotonic()
        try:
            report = module.tune(executor=executor)
        finally:
            executor.progress = None
        assert time.monotonic() - started < 90
        by_backend = {r.backend: r for r in report.results}
        expected = {"RaisingBackend": ERROR, "SegfaultBackend": CRASHED, "HangingBackend": TIMED_OUT,
                    "OomBackend": OOM, "FastBackend": OK}
        assert {b: r.status for b, r in by_backend.items()} == expected
        for name, result in by_backend.items():
            assert result.log_path and result.node and result.gpu, name
            if result.status != OK:
                assert result.error, name
        assert "always fails to build" in by_backend["RaisingBackend"].error
        assert "died" in by_backend["SegfaultBackend"].error
        assert "Segmentation fault" in Path(by_backend["SegfaultBackend"].log_path).read_text()
        assert "task_timeout_s" in by_backend["HangingBackend"].error
        assert "out of memory" in by_backend["OomBackend"].error
        assert report.chosen_result().backend == "FastBackend"
        assert module.state == ModuleState.TUNED
        x = torch.randn(4, 8)
        torch.testing.assert_close(module(x), module.module.linear(x))
        assert len(executor.pool.alive()) == 2            # the dead and the killed actor were replaced
        done = [e for e in events if e["event"] == "done" and e["task"] == "build"]
        assert sorted(e["status"] for e in done) == sorted(expected.values())
        assert all(set(e) >= {"module", "key", "backend", "event", "status", "node", "gpu", "task", "elapsed_s",
                              "time"} for e in events)
        assert {e["task"] for e in events} == {"build", "baseline", "remeasure"}

    def test_module_and_samples_travel_once_per_module(self, executor):
        before_puts = executor.puts
        before = executor.actor_stats()
        module = recorded("once", max_throughput([fast(tag=i) for i in range(5)]))
        module.tune(executor=executor)
        after = executor.actor_stats()
        assert executor.puts - before_puts == 2            # the module and its samples, once
        loads = sum(s["loads"] for s in after) - sum(s["loads"] for s in before)
        assert 1 <= loads <= len(after)                    # at most one fetch per actor
        assert sum(s["baselines"] for s in after) - sum(s["baselines"] for s in before) == 1
        assert all("once" not in s["modules"] for s in after)   # discarded after the module was tuned

    def test_inline_and_ray_choose_the_same_backend(self, executor):
        def candidates():
            return max_throughput([fast(infer_delay_s=0.002), fast()])

        on_ray = recorded("same", candidates()).tune(executor=executor)
        inline = recorded("same", candidates()).tune(executor=InlineExecutor())
        assert on_ray.chosen == inline.chosen == fast().key()

    def test_first_wins_follows_priority_and_cancels_the_rest(self, executor, tmp_path):
        events = []
        flag = tmp_path / "second-done"

        def progress(event):   # the first build goes on once the driver has the second's result
            events.append(event)
            if event["event"] == "done" and event["key"] == second.key():
                flag.touch()

        executor.progress = progress
        first, second = fast(wait_for=str(flag), tag=1), fast(tag=2)
        last = HangingBackend(HelperConfig(build_s=120))
        strategy = ait.FirstWinsStrategy([first, second, last], measure_config=MEASURE, **BUSY_HOST)
        started = time.monotonic()
        try:
            report = recorded("first", strategy).tune(executor=executor)
        finally:
            executor.progress = None
        assert time.monotonic() - started < 60
        assert [r.key for r in report.results] == [second.key(), first.key()]   # completion order
        assert report.chosen == first.key()
        cancelled = [e for e in events if e["key"] == last.key() and e["event"] == "done"]
        assert [e["status"] for e in cancelled] == ["cancelled"]

    def test_builds_start_on_the_other_actors_while_one_times_eager(self, executor):
        """The eager baseline and the build are queued together (timing first): the build is dispatched to
        the other actor before the baseline has ended, not after it."""
        events = []
        executor.progress = events.append
        before = {st["slot"]: st["baselines"] for st in executor.actor_stats()}
        try:
            only = fast(tag=7, build_s=1.0)
            report = recorded("overlap", max_throughput([only])).tune(executor=executor)
        finally:
            executor.progress = None
        order = [(e["task"], e["event"]) for e in events if e["event"] != "queued"]
        assert order.index(("build", "building")) < order.index(("baseline", "done"))   # under way meanwhile
        (result,) = report.results
        assert result.ok and report.baseline
        timed_eager = [st["slot"] for st in executor.actor_stats() if st["baselines"] > before.get(st["slot"], 0)]
        assert len(timed_eager) == 1
        assert result.gpu != executor.pool.slots[timed_eager[0]].identity()["gpu"]   # on the other actor

    def test_remeasure_when_finalists_ran_on_different_gpus(self, executor):
        strategy = max_throughput([fast(tag=1), fast(tag=2)])
        report = recorded("remeasure", strategy).tune(executor=executor)
        assert len({r.gpu for r in report.results}) == 2
        assert report.remeasured_baseline and set(report.remeasured_baseline) == {1, 4}
        for r in report.results:
            assert set(r.remeasured) == set(r.timings) == {1, 4}
            assert r.remeasured[1]["runs"] == 5
        data = report.to_dict()
        assert all(r["timings"] and r["remeasured"] for r in data["results"])
        rows = report.rows()
        assert all(f"raw_ms_per_call_bs{bs}" in row for row in rows for bs in (1, 4))
        assert "Confirm session (side by side" in report.markdown()

    def test_finalists_measured_on_one_gpu_are_remeasured_there_too(self, executor):
        """Numbers of one GPU taken at different times drift as well: they are re-measured beside eager."""
        module = recorded("one-gpu", None)
        context = TuneContext("one-gpu", module.module, module.samples, torch.device("cpu"))
        where = executor.pool.alive()[1].identity()
        same = [BuildResult(key=k, backend="FastBackend", spec=fast(tag=i).spec(), status=OK, node=where["node"],
                            gpu=where["gpu"]) for i, k in enumerate("ab")]
        session = executor.confirm(context, same)
        # each size, and passes over the recorded calls in their order (MIX)
        assert not session.failed and set(session.eager) == {1, 4, MIX} and session.rounds == 5
        assert set(session.control) == {1, 4, MIX} and set(session.candidates) == {"a", "b"}   # the A/A control too
        assert all(set(r.remeasured) == {1, 4} for r in same)

    def test_ctrl_c_cancels_outstanding_work(self, executor):
        def interrupt(event):
            if event["event"] == "done" and event["task"] == "build":
                raise KeyboardInterrupt

        generations = [s.generation for s in executor.pool.slots]
        executor.progress = interrupt
        module = recorded("interrupted", max_throughput([fast(), HangingBackend(HelperConfig(build_s=120))]))
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                module.tune(executor=executor)
        finally:
            executor.progress = None
        assert time.monotonic() - started < 60
        assert module.state == ModuleState.EAGER
        assert sum(s.generation for s in executor.pool.slots) == sum(generations) + 1   # the hung actor was killed

    def test_device_resolution_uses_the_cluster(self, executor):
        assert executor.resolve_device(None).type == "cpu"      # logical GPUs, but no CUDA in the actors
        assert executor.resolve_device("cuda:1") == torch.device("cuda")
        assert executor.resolve_device("cpu") == torch.device("cpu")


def test_default_executor_is_ray_in_local_mode_where_there_are_gpus(monkeypatch):
    from aitune_ray.api.tuning import default_executor

    monkeypatch.delenv("AITUNE_RAY_EXECUTOR", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    executor = default_executor()
    assert isinstance(executor, RayExecutor) and executor.address is None and executor.pool is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert isinstance(default_executor(), InlineExecutor)     # no GPU: a local Ray would run one at a time
    monkeypatch.setenv("AITUNE_RAY_EXECUTOR", "inline")
    assert isinstance(default_executor(), InlineExecutor)


def test_artifacts_go_inline_or_through_the_artifact_dir(tmp_path):
    small, big = tmp_path / "small.bin", tmp_path / "big.bin"
    small.write_bytes(b"x" * 10)
    big.write_bytes(b"y" * 100)
    shared = tmp_path / "shared"
    packed, large = artifacts.pack({"small.bin": str(small), "big.bin": str(big)}, limit_bytes=50,
                                   artifact_dir=str(shared), prefix="m/key")
    assert packed["small.bin"] == b"x" * 10 and not large
    assert Path(packed["big.bin"]) == shared / "m" / "key" / "big.bin"
    packed, large = artifacts.pack({"big.bin": str(big)}, limit_bytes=50, artifact_dir=None, prefix="m/key")
    assert packed == {} and large == {"big.bin": big}
    stored = artifacts.store({"small.bin": b"x" * 10, "big.bin": str(shared / "m" / "key" / "big.bin")},
                             tmp_path / "driver")
    files = artifacts.fetch(stored, tmp_path / "restore")
    assert files["small.bin"].read_bytes() == b"x" * 10 and files["big.bin"].read_bytes() == b"y" * 100
    with pytest.raises(ait.AITuneRayError):
        artifacts.pack({"../evil": str(small)}, limit_bytes=50, artifact_dir=None, prefix="p")
    pytest.importorskip("fsspec")
    packed, _ = artifacts.pack({"big.bin": str(big)}, limit_bytes=50, artifact_dir="memory://ait", prefix="m/k")
    assert packed["big.bin"] == "memory://ait/m/k/big.bin"
    assert artifacts.fetch(packed, tmp_path / "url")["big.bin"].read_bytes() == b"y" * 100


def test_artifacts_built_on_another_node_reach_the_checkpoint(tmp_path):
    """Two nodes with one (fake) GPU each; artifacts come back through the object store, never the disk."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes()
        ray_init(address=cluster.address)
        head = ray.get_runtime_context().get_node_id()
        onnx = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False))
        strategy = max_throughput([onnx, WeightsAotBackend()])
        strategy.enable_performance_validation(False)
        module = recorded("two-nodes", strategy)
        with RayExecutor(inline_artifact_limit_mb=0, remeasure_rounds=3, task_timeout_s=120,
                         log_dir=str(tmp_path / "logs")) as executor:
            report = module.tune(executor=executor)
            assert all(r.ok for r in report.results), report.markdown()
            node_ids = {r.node.rpartition("node ")[2].rstrip(")") for r in report.results}
            assert len(node_ids) == 2 and any(not head.startswith(n) for n in node_ids)
            assert all(r.remeasured for r in report.results)        # two nodes: re-measured on one of them
            x = torch.randn(4, 8)
            expected = module.module.linear(x)
            context = TuneContext("two-nodes", module.module, module.samples, torch.device("cpu"),
                                  workdir=tmp_path / "materialize")
            for result in report.results:                            # each node's artifact, one at a time
                (name, path), = result.artifacts.items()
                assert Path(path).is_file() and Path(path).parent.parent.name == "artifacts"   # driver's copy
                module.use_backend(executor.materialize(context, result))
                target = tmp_path / f"{result.backend}.ait"
                ait.save(module, target)
                fresh = ait.Module(SlowNet(), name="two-nodes")
                ait.load(fresh, target)
                assert fresh.backend is not None and fresh.backend.name == result.backend
                torch.testing.assert_close(fresh(x), expected, rtol=1e-4, atol=1e-5)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a driver without CUDA")
def test_a_cuda_result_on_a_driver_without_cuda_is_saved_as_is(tmp_path):
    """The chosen backend ran on a GPU worker: the driver keeps spec, state and artifact for the checkpoint."""
    module = recorded("gpu-built", None)
    backend = WeightsAotBackend().build(module.module, module.samples, torch.device("cpu"), tmp_path / "build")
    state, files = backend.export()
    result = BuildResult(key=backend.key(), backend=backend.name, spec=backend.spec(), status=OK, device="cuda",
                         gpu="NVIDIA H200 #3", node="gpu-node", state=state,
                         artifacts={name: path.read_bytes() for name, path in files.items()})
    context = TuneContext("gpu-built", module.module, module.samples, torch.device("cuda"),
                          workdir=tmp_path / "driver")
    detached = RayExecutor().materialize(context, result)
    assert detached.name == "WeightsAotBackend" and detached.spec() == backend.spec()
    module.use_backend(detached)
    with pytest.raises(ait.AITuneRayError, match="no CUDA GPU"):
        module(torch.randn(2, 8))
    ait.save(module, tmp_path / "gpu.ait")
    fresh = ait.Module(SlowNet(), name="gpu-built")
    ait.load(fresh, tmp_path / "gpu.ait", device_map={"": "cpu"})
    x = torch.randn(2, 8)
    assert fresh.backend.name == "WeightsAotBackend"
    torch.testing.assert_close(fresh(x), module.module.linear(x))


def test_tune_on_ray_starts_ray_locally_and_shuts_it_down(monkeypatch):
    """Without a GPU the default is inline (aitune_ray.executors.choice): Ray asked for by the environment is
    started on this machine for the tuning, and stopped after it."""
    monkeypatch.setenv("AITUNE_RAY_EXECUTOR", "ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    module = ait.Module(SlowNet(), name="local", strategy=max_throughput([fast()]))
    report = ait.tune(module, [torch.randn(4, 8) for _ in range(2)], call_as_given=True)
    assert not ray.is_initialized()                        # the executor started Ray, so it stopped it
    (result,) = report.modules[0].results
    assert result.ok and (torch.cuda.is_available() or "actor 0" in result.gpu)   # no GPU here: a CPU actor
    assert report.modules[0].chosen == result.key and module.state == ModuleState.TUNED


def test_closing_a_ray_it_started_kills_its_monitor_before_shutting_it_down(monkeypatch):
    """Ray's shutdown waits up to a second for each process it sent SIGTERM; its autoscaler monitor takes that
    second. The executor that started Ray kills the monitor first, and Ray is still shut down."""
    from aitune_ray.cluster import session

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    seen = []
    real = session.stop_local_monitor

    def spy():
        (info,) = ray._private.worker._global_node.all_processes["monitor"]
        killed = real()
        seen.append((killed, info.process.poll()))
        return killed

    monkeypatch.setattr(session, "stop_local_monitor", spy)
    executor = RayExecutor(max_actors=1)
    executor.open()
    executor.close()
    assert seen == [(True, -signal.SIGKILL)]
    assert not ray.is_initialized() and executor.shutdown_s is not None


SCRIPT = '''
import sys
import torch
import torch.nn.functional as F
import ray
import aitune_ray as ait
from aitune_ray.backend import TorchInductorJitBackend


class Doubled(torch.nn.Module):    # defined in __main__, called from a compiled parent's forward
    def forward(self, x):
        return F.gelu(x) * 2.0


if __name__ == "__main__":
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": sys.argv[1]}})
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Doubled()).eval()
    module = ait.Module(model, "script", strategy=ait.OneBackendStrategy(TorchInductorJitBackend()))
    executor = ait.RayExecutor(max_actors=1)
    try:
        ait.tune(module, [torch.randn(4, 8)], device="cpu", executor=executor, call_as_given=True)
    finally:
        executor.close()
        ray.shutdown()
    (result,) = module.report.results
    print("RESULT", result.status, result.error)
'''


def test_a_script_s_own_submodule_class_compiles_on_an_actor(tmp_path):
    """A class from the driver's __main__ reaches the actor pickled by value; Dynamo, inlining its forward,
    looks its globals up in the worker's __main__, which must have them."""
    import subprocess
    import sys

    script = tmp_path / "tune_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, str(script), ROOT], env=env, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), proc.stdout + proc.stderr[-2000:])
    assert line.startswith("RESULT ok"), line


def test_an_unknown_warm_up_mode_is_refused_before_ray_starts():
    with pytest.raises(ConfigError, match="warm_up must be one of compile, imports, off"):
        RayExecutor(warm_up="everything")
    assert not ray.is_initialized()


def test_on_a_ray_it_started_here_the_device_is_known_without_waiting_for_an_actor(monkeypatch):
    """device=None on a machine with CUDA and a Ray this executor started: cuda, answered at once (the first
    actor answers only once it is up and warmed, and the driver has its own work to do meanwhile). So on a
    Ray it joined whose GPUs are all on the driver's node (a job submitted to a one-machine cluster). On
    another Ray it joined, the first actor to start is asked."""
    executor = RayExecutor()
    executor.pool = object()          # opened
    asked, here = [], [False]
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"GPU": 1.0, "CPU": 4.0})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(executor.driver_gpu, "actors_have_cuda", lambda: asked.append(True) or True)
    monkeypatch.setattr(executor.session, "driver_has_the_gpu", lambda: here[0])
    executor.session.local = True
    assert executor.resolve_device(None) == torch.device("cuda") and asked == []
    executor.session.local = False
    assert executor.resolve_device(None) == torch.device("cuda") and asked == [True]
    here[0] = True
    assert executor.resolve_device(None) == torch.device("cuda") and asked == [True]


@pytest.mark.parametrize("actors, share, expected", [(1, 1, True), (2, 0.5, True), (2, 1, False), (4, 0.5, False),
                                                     (1, 0, False)])
def test_the_driver_knows_when_every_actor_is_on_one_gpu(monkeypatch, actors, share, expected):
    """On one GPU the driver times eager itself (DriverGpu.times), also when several actors share
    that GPU: they take turns at it (aitune_ray.measure.turns)."""
    executor = RayExecutor(gpus_per_actor=share)
    monkeypatch.setattr(executor.session, "actors", lambda: actors)
    assert executor.session.on_one_gpu() is expected
    assert executor.actors_share_gpus() is (0 < share < 1)
    # On a cluster whose one GPU is this driver's, a pool of that many actors would be on it with the driver,
    # whose actors then take turns too (asked before the pool is made: the size decides, not the pool).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(executor.session, "driver_has_the_gpu", lambda: True)
    monkeypatch.setattr(executor.session, "actors", lambda: 0)
    assert executor.session.driver_uses_the_gpu(actors) is expected
    executor.session.driver_turns = True
    assert executor.actors_share_gpus()


def test_actors_that_share_gpus_start_one_per_gpu_first_then_the_rest_and_each_knows_it_shares(tmp_path):
    """gpus_per_actor=0.5 on a node of two (fake) GPUs, three actors: the first wave is one actor per GPU,
    the third starts only once those have answered, beside one of them; the job's builds are done, and each
    actor's worker is set to take turns at its GPU (the turns themselves: tests/test_turns.py)."""
    ray_init(num_cpus=2, num_gpus=2)
    executor = RayExecutor(gpus_per_actor=0.5, max_actors=3, cpus_per_actor=0, log_dir=str(tmp_path / "logs"))
    try:
        executor.open()
        pool = executor.pool
        started = [s.generation for s in pool.slots]              # nothing has asked for an actor yet
        first = ray.get([s.ready_ref for s in pool.slots[:2]], timeout=120)
        alive = len(pool.alive())                                 # the first wave has answered
        module = recorded("shared", max_throughput([fast(tag=1), fast(tag=2), fast(tag=3)]))
        report = module.tune(executor=executor)
        stats = executor.actor_stats()
        identities = [slot.identity() for slot in pool.alive()]
    finally:
        executor.close()
        ray.shutdown()
    assert started == [1, 1, 0] and alive == 3
    assert sorted(tuple(i["gpu_ids"]) for i in first) == [("0",), ("1",)]   # one per GPU
    assert [r.status for r in report.results] == [OK, OK, OK], [r.error for r in report.results]
    assert len(stats) == 3 and all(s["shares_gpu"] for s in stats)
    assert sorted(collections.Counter(tuple(i["gpu_ids"]) for i in identities).values()) == [1, 2]


@pytest.mark.parametrize("how", ["answered", "died", "never answered"])
def test_the_second_wave_starts_once_the_first_has_answered_or_died_or_after_the_time_limit(
        monkeypatch, tmp_path, how):
    """Without Ray: actors are started by a stand-in. The second wave waits while an actor of the first is
    starting, and starts once it answered, once it is gone, or once LATER_AFTER_S has passed."""
    from aitune_ray.cluster import pool as pool_module

    def spawn(self, slot):
        slot.generation += 1
        slot.actor, slot.ready_ref, slot.info = object(), None, None

    monkeypatch.setattr(pool_module.ActorPool, "_spawn", spawn)
    pool = pool_module.ActorPool(4, num_gpus=0.5, num_cpus=1, max_restarts=1, log_dir=str(tmp_path),
                                 limit_bytes=0, artifact_dir=None)
    first, later = pool.slots[:2], pool.slots[2:]
    first[0].info = {"gpu": "0"}                       # one of the first wave has answered, one has not
    assert [s.num_gpus for s in pool.slots] == [0.501, 0.501, 0.499, 0.499]
    assert len(pool.alive()) == 2 and [s for s in pool.idle() if s.dispatchable()][0] is first[0] and all(s.generation == 0 for s in later)
    if how == "answered":
        first[1].info = {"gpu": "1"}
    elif how == "died":
        first[1].actor = None                          # gone (pool.kill would call Ray)
    else:
        monkeypatch.setattr(pool_module, "LATER_AFTER_S", -1.0)
    assert len(pool.alive()) == (3 if how == "died" else 4) and all(s.generation == 1 for s in later)


def _tune_while_the_driver_profiles(monkeypatch, tmp_path, wait_for, **executor_kwargs) -> tuple:
    """A KernelSelector job (whose plan the driver profiles for) and a plain one, on Ray with one (fake) GPU,
    the driver timing eager as on one local GPU. The pool hears its actors' answers only once the driver
    profiles, and the profile first waits (up to 120 s each) for each event of wait_for, then for the plain
    job to be building. Returns what those waits returned, the actors' stats, the slots' generations and the
    results, with Ray shut down."""
    import threading

    from aitune_ray.backend import KernelSelectorBackend, KernelSelectorBackendConfig, TorchEagerBackend
    from aitune_ray.cluster import pool as pool_module
    from tests.forge_helpers import GeluNorm, SleepyEagerBackend, TestGeluProvider

    profiling, building = threading.Event(), threading.Event()
    ready, planner = pool_module.Slot.ready, KernelSelectorBackend.planner.__func__
    fast_measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_cv=0.1, max_seconds=0.1)
    config = KernelSelectorBackendConfig(kernel_providers=[TestGeluProvider("cached")],
                                         measure=fast_measure.to_dict(), final_rounds=5)
    selector, plain = KernelSelectorBackend(config, TorchEagerBackend()), SleepyEagerBackend(HelperConfig(build_s=0.5))
    waited = []

    def progress(event):
        if event["key"] == plain.key() and event["event"] == "building":
            building.set()

    class WaitingPlanner:
        def __init__(self, inner):
            self.inner = inner

        def profile(self, module, samples):
            profiling.set()
            waited.append(tuple(event.wait(timeout=120) for event in [*wait_for, building]))
            self.inner.profile(module, samples)

        def search(self):
            return self.inner.search()

        def cancel(self):
            self.inner.cancel()

    monkeypatch.setattr(pool_module.Slot, "ready", lambda self: profiling.is_set() and ready(self))
    monkeypatch.setattr(DriverGpu, "times", lambda self, context: True)   # as on one local GPU
    monkeypatch.setattr(KernelSelectorBackend, "planner",
                        classmethod(lambda cls, spec, runner: WaitingPlanner(planner(cls, spec, runner))))
    strategy = ait.MaxThroughputStrategy([selector, plain], measure_config=fast_measure)
    model = ait.Module(GeluNorm().eval(), "gelu_norm", strategy=strategy)
    ray_init(num_cpus=2, num_gpus=1)
    executor = RayExecutor(cpus_per_actor=0, log_dir=str(tmp_path / "logs"), **executor_kwargs)
    executor.progress = progress
    gen = torch.Generator().manual_seed(2)
    try:
        ait.tune(model, [torch.randn(b, 32, 256, generator=gen) for b in (4, 4, 2)], executor=executor,
                 call_as_given=True)
        stats, generations = executor.actor_stats(), [s.generation for s in executor.pool.slots]
    finally:
        executor.close()
        ray.shutdown()
    return waited, stats, generations, model.report.results


def test_while_the_driver_profiles_for_a_kernel_plan_actors_sharing_the_gpu_start_and_build(monkeypatch, tmp_path):
    """One (fake) GPU, two actors in two waves, a KernelSelector job (whose plan the driver profiles for) and a
    plain one. The pool hears the first actor's answer only once the driver profiles, and the profile waits
    until the second actor has been started and the plain job is building: both happen only when the batch's
    loop goes on polling the pool while the driver profiles (before, it waited for the profile), and when
    actors that share their GPU may build during the profile (before, every build waited for it)."""
    import threading

    from aitune_ray.cluster import pool as pool_module

    later, spawn = threading.Event(), pool_module.ActorPool._spawn

    def spawning(self, slot):
        spawn(self, slot)
        if slot.num_gpus < 0.5:   # an actor of the later wave (0.499 of the GPU)
            later.set()

    monkeypatch.setattr(pool_module.ActorPool, "_spawn", spawning)
    waited, _, generations, results = _tune_while_the_driver_profiles(monkeypatch, tmp_path, [later],
                                                                      gpus_per_actor=0.5, max_actors=2)
    assert waited == [(True, True)]   # the later actor started, and the plain job built, while the driver profiled
    assert generations == [1, 1]
    assert [r.status for r in results] == [OK, OK], [r.error for r in results]


def test_an_actor_on_the_drivers_one_gpu_takes_turns_and_builds_while_the_driver_profiles(monkeypatch, tmp_path):
    """One actor with the whole (fake) GPU, which the driver uses too (as on a one-GPU machine that runs the
    job's driver): the actor takes turns at it, as actors sharing a GPU do, so a plain job builds while the
    driver profiles for a kernel plan (the profile then holds a build's turn). Before, an actor with a GPU of
    its own took no turns, and every build waited for that profile."""
    monkeypatch.setattr(RaySession, "driver_uses_the_gpu", lambda self, size: True)
    waited, stats, _, results = _tune_while_the_driver_profiles(monkeypatch, tmp_path, [],
                                                                gpus_per_actor=1.0, max_actors=1)
    assert waited == [(True,)]   # the plain job's build began before the driver's profile ended
    assert [s["shares_gpu"] for s in stats] == [True]
    assert [r.status for r in results] == [OK, OK], [r.error for r in results]


def test_finalists_are_re_measured_on_the_actor_that_built_most_of_them(tmp_path):
    """Two actors on one (fake) GPU: the re-measure runs on the actor that built most finalists, so that only
    the others' finalists are restored there (a JIT backend is compiled again to be restored)."""
    ray_init(num_cpus=2, num_gpus=1)
    executor = RayExecutor(gpus_per_actor=0.5, log_dir=str(tmp_path / "logs"))
    try:
        module = recorded("holder", max_throughput([fast(tag=1), fast(tag=2), fast(tag=3)]))
        report = module.tune(executor=executor)
        stats = executor.actor_stats()
    finally:
        executor.close()
        ray.shutdown()
    finalists = [r for r in report.results if r.remeasured]
    assert len(finalists) == 3, [(r.key, r.status, r.error) for r in report.results]
    built = collections.Counter(r.log_path for r in finalists)
    assert sum(s["restores"] for s in stats) == len(finalists) - max(built.values()), (built, stats)


def _ray_buffer_peak(tmp_path, tied: int) -> int:
    """The peak of simulated buffers held on the one actor (a fresh process) of an executor while MaxThroughput
    (one finalist) tunes tied candidates that each hold one."""
    from aitune_ray.testing import SimAffine, sim

    executor = RayExecutor(gpus_per_actor=1.0, max_actors=1, remeasure_rounds=5, log_dir=str(tmp_path / f"logs{tied}"))
    try:
        backends = [sim(f"tied{i}", ms=1.0, noise=0.0, buffer_bytes=100 << 20) for i in range(tied)]
        # validation off: screening then prunes nothing for being slower (these calls take microseconds of real
        # time, which the simulated clock does not see), so only the cap on finalists releases builds
        strategy = max_throughput(backends, max_finalists=1).enable_performance_validation(False)
        module = ait.Module(SimAffine(ms=2.0, noise=0.0), name=f"tied{tied}", strategy=strategy)
        for bs in (1, 4):
            module(torch.ones(bs, 3))
        report = module.tune(executor=executor)
        assert all(r.ok for r in report.results), [r.error for r in report.results]
        (stats,) = executor.actor_stats()
    finally:
        executor.close()
    return stats["simulated_buffer_peak"]


def test_tied_candidates_on_ray_do_not_grow_what_the_actor_holds(tmp_path):
    """Each build that screening leaves out of the finalists is released before its actor builds the next."""
    ray_init(num_cpus=2, num_gpus=1)
    try:
        two, eight = _ray_buffer_peak(tmp_path, 2), _ray_buffer_peak(tmp_path, 8)
    finally:
        ray.shutdown()
    assert two == 2 * (100 << 20) and eight <= 1.3 * two, (two, eight)   # the finalist and the build under way


@pytest.mark.parametrize("gpus, built, expected", [
    ((0, 0), (1, 0, 1), 1),                  # one GPU: the second actor built two of the three finalists
    ((0, 0, 1), (0, 0, 1, 1, 2, 2, 2), 0),   # GPU 0 measured most finalists (4, two per actor): one of its
])                                           # actors, not GPU 1's, although that one built more (3)
def test_the_re_measure_goes_to_the_actor_that_built_most_finalists_even_when_it_is_not_the_first(
        monkeypatch, tmp_path, gpus, built, expected):
    """The choice itself, without Ray: slot i on GPU gpus[i]; finalist j built by slot built[j]. The re-measure
    goes to the GPU that measured most finalists, and there to the actor that built most of them."""
    from aitune_ray.cluster.pool import Slot
    from aitune_ray.cluster.timing_calls import remeasure_rank

    where = [{"node": "host", "gpu": f"H200 #{g}"} for g in gpus]
    slots = [Slot(i, actor=object(), generation=1, log_path=f"actor{i}.1.log", info=dict(where[i]))
             for i in range(len(gpus))]
    results = [BuildResult(key=f"k{i}", backend="B", spec={}, status=OK, log_path=f"actor{a}.1.log", **where[a])
               for i, a in enumerate(built)]
    rank = remeasure_rank(results)
    assert min(slots, key=lambda slot: (rank(slot), slot.index)) is slots[expected]


@pytest.mark.parametrize("gpus, here, expected", [(1.0, 1.0, True), (2.0, 2.0, True), (2.0, 1.0, False),
                                                  (1.0, 0.0, False), (0.0, 0.0, False)])
def test_a_driver_on_a_cluster_times_eager_itself_only_where_the_cluster_s_gpus_are_its_node_s(
        monkeypatch, tmp_path, gpus, here, expected):
    """`ray job submit` to a one-GPU machine: the job's driver runs on the node of the only GPU, beside the
    actor, and times eager itself while that actor starts (as in local mode); on a cluster with GPUs
    elsewhere an actor times it. (CUDA is granted here, and the module has no tensor off the GPU.)"""
    from aitune_ray.model.samples import SampleStore

    executor = RayExecutor("127.0.0.1:1")
    monkeypatch.setattr(executor.session, "actors", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    context = TuneContext("m", torch.nn.Identity(), SampleStore([]), torch.device("cuda"), workdir=tmp_path)
    nodes = [{"NodeID": "head", "Alive": True, "Resources": {"GPU": here} if here else {}},
             {"NodeID": "other", "Alive": True, "Resources": {"GPU": gpus - here} if gpus > here else {}}]
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"GPU": gpus} if gpus else {})
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray, "get_runtime_context",
                        lambda: type("Context", (), {"get_node_id": staticmethod(lambda: "head")})())
    assert executor.session.driver_has_the_gpu() is expected
    assert executor.driver_gpu.times(context) is expected
    executor.session.local = True
    assert executor.session.driver_has_the_gpu() is True and executor.driver_gpu.times(context) is True
