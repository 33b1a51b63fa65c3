"""A local Ray started by RayExecutor.open() on a thread of its own: open() returns at once, what needs the
actors waits for them, a failed start is a ClusterError where it is needed, and close() undoes it all."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

import aitune_ray as ait  # noqa: E402
from aitune_ray.cluster import RayExecutor  # noqa: E402
from aitune_ray.cluster.driver_gpu import DriverGpu  # noqa: E402
from aitune_ray.errors import ClusterError  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from tests.ray_helpers import FastBackend, HelperConfig, SlowNet  # noqa: E402

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)


@pytest.fixture
def held_init(monkeypatch):
    """ray.init waits until the test lets it go; yields (entered, go)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    entered, go = threading.Event(), threading.Event()
    real = ray.init

    def init(*args, **kwargs):
        entered.set()
        assert go.wait(60), "the test never let ray.init go on"
        return real(*args, **kwargs)

    monkeypatch.setattr(ray, "init", init)
    yield entered, go
    go.set()


def _start_thread(executor: RayExecutor) -> threading.Thread:
    """The thread open() started Ray on (checked after close(): it must have ended)."""
    return executor.session.starting._thread


def test_open_returns_while_ray_starts_and_the_pool_waits_for_it(held_init):
    entered, go = held_init
    assert not ray.is_initialized()
    executor = RayExecutor(max_actors=1)
    try:
        executor.open()
        thread = _start_thread(executor)
        assert entered.wait(60) and not ray.is_initialized()   # open() returned; Ray is still starting
        # The device is known without Ray: a local Ray has this process's GPUs (none here).
        expected = "cuda" if torch.cuda.is_available() else "cpu"
        assert executor.resolve_device(None) == torch.device(expected) and not ray.is_initialized()
        go.set()
        pool = executor.pool                                    # waits for the start
        assert ray.is_initialized() and len(pool.slots) == 1 and executor.open_s > 0
        info = ray.get(pool.slots[0].ready_ref, timeout=120)
        assert info["pid"] != os.getpid()
        # Ray's head processes outlive ray.init's return on the thread that started them
        gcs = ray._private.worker._global_node.all_processes["gcs_server"]
        assert all(p.process.poll() is None for p in gcs)
    finally:
        executor.close()
    assert not ray.is_initialized() and not thread.is_alive()  # shut down, and its thread is gone


def test_a_failed_start_is_raised_where_the_actors_are_needed_and_close_still_works(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def broken(*args, **kwargs):
        raise RuntimeError("no room for the object store")

    monkeypatch.setattr(ray, "init", broken)
    executor = RayExecutor(max_actors=1)
    executor.open()
    thread = _start_thread(executor)
    with pytest.raises(ClusterError, match="starting Ray on this machine failed: RuntimeError: no room"):
        executor.pool  # noqa: B018
    with pytest.raises(ClusterError, match="no room"):
        executor.actor_stats()
    executor.close()
    assert not ray.is_initialized() and not thread.is_alive()


def test_close_during_the_start_waits_for_it_then_shuts_ray_down(held_init):
    entered, go = held_init
    executor = RayExecutor(max_actors=1)
    executor.open()
    thread = _start_thread(executor)
    assert entered.wait(60)
    closer = threading.Thread(target=executor.close)
    closer.start()
    go.set()
    closer.join(120)
    assert not closer.is_alive() and not ray.is_initialized() and not thread.is_alive()


def test_tune_records_before_ray_is_up(held_init):
    """tune() with a RayExecutor it opens: the recording (the user's own calls) runs while Ray starts."""
    entered, go = held_init
    calls = []

    def forward(x):
        calls.append(ray.is_initialized())
        if len(calls) == 1:
            assert entered.wait(60)
            go.set()   # the recording ran with Ray still starting: now let it finish
        return module(x)

    module = ait.Module(SlowNet(), name="early", strategy=ait.OneBackendStrategy(FastBackend(HelperConfig())))
    executor = RayExecutor(max_actors=1)
    try:
        report = ait.tune(forward, [torch.randn(4, 8)], device="cpu", executor=executor, call_as_given=True)
    finally:
        executor.close()
    assert calls == [False]
    assert report.modules[0].results[0].ok and not ray.is_initialized()


def test_eager_is_timed_on_the_driver_while_ray_is_still_starting(held_init, monkeypatch):
    """On one local GPU (DriverGpu.times, which needs CUDA: granted here) MaxThroughput's eager
    baseline is timed on the driver without waiting for Ray: here Ray cannot finish starting until that
    baseline is done (a baseline that waited for the actors would leave ray.init held, and the start fails)."""
    entered, go = held_init
    monkeypatch.setattr(DriverGpu, "times", lambda self, context: True)
    seen = []

    def progress(event):
        if event.get("task") == "baseline" and event.get("event") == "done":
            seen.append((str(event.get("gpu")), event.get("status"), ray.is_initialized()))
            go.set()

    strategy = ait.MaxThroughputStrategy([FastBackend(HelperConfig())], measure_config=MEASURE)
    module = ait.Module(SlowNet(), name="early_eager", strategy=strategy)
    executor = RayExecutor(max_actors=1, progress=progress)
    try:
        report = ait.tune(module, [torch.randn(4, 8)], device="cpu", executor=executor, call_as_given=True)
    finally:
        executor.close()
    (where, status, ray_up), = seen
    assert where.startswith("driver") and status == "ok" and not ray_up
    assert report.modules[0].results[0].ok    # the build then ran on the actor, once Ray was up


SIGTERM_SCRIPT = '''
import os, signal, sys
import ray
from aitune_ray.cluster import RayExecutor

executor = RayExecutor(max_actors=1)
executor.open()
executor.pool   # the start on its thread is done
gcs = ray._private.worker._global_node.all_processes["gcs_server"][0].process.pid
started = open(f"/proc/{gcs}/stat").read().rsplit(")", 1)[1].split()[19]   # its start time, against pid reuse
print("GCS", gcs, started, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
signal.pause()
'''


def test_sigterm_to_a_driver_whose_ray_started_on_a_thread_exits_and_takes_ray_down(tmp_path):
    """ray.init sets its SIGTERM handler (exit, then Ray's exit hook) only on the main thread; the executor
    sets the same one when it starts Ray on a thread. The driver exits with 15 and Ray's GCS goes with it."""
    import signal
    import subprocess
    import sys
    import time

    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", SIGTERM_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=180)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("GCS ")), None)
    assert line is not None, proc.stdout + proc.stderr[-2000:]
    assert proc.returncode == signal.SIGTERM, (proc.returncode, proc.stderr[-2000:])
    gcs, started = int(line.split()[1]), line.split()[2]
    deadline = time.monotonic() + 30
    while _running(gcs, started):   # the GCS is killed as the driver's process ends; wait for that death
        assert time.monotonic() < deadline, f"Ray's GCS (pid {gcs}) outlived its driver"
        time.sleep(0.1)


def _running(pid: int, started: str) -> bool:
    """Whether the process pid that started at started (/proc's clock ticks) still runs (a zombie does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[19] == started and fields[0] != "Z"
