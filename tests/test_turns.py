"""Turns at a shared GPU (aitune_ray.measure.turns): a timing has the GPU alone, builds share it.

Other processes are probed with a non-blocking flock in a child process, so every check reads the
lock's state at that moment: no sleep, no ordering luck.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from aitune_ray.worker.candidate import run_candidate
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.measure.turns import NO_TURNS, GpuTurns, lock_path, turns_for
from aitune_ray.records.results import CandidateJob
from aitune_ray.model.samples import Sample, SampleStore
from helpers import FastBackend, HelperConfig

ROOT = str(Path(__file__).resolve().parent.parent)
PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, (fcntl.LOCK_EX if sys.argv[2] == "alone" else fcntl.LOCK_SH) | fcntl.LOCK_NB)
except BlockingIOError:
    print("busy")
else:
    print("free")
"""

HOLDER = """
import sys
from aitune_ray.measure.turns import GpuTurns
turns = GpuTurns(sys.argv[1])
with (turns.timing() if sys.argv[2] == "alone" else turns.building()):
    print("held", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def probe(path: str, mode: str) -> str:
    """Whether another process could take the lock now: "free" or "busy"."""
    return subprocess.run([sys.executable, "-c", PROBE, path, mode], capture_output=True, text=True,
                          check=True).stdout.strip()


@contextlib.contextmanager
def held_elsewhere(path: str, mode: str):
    """Another process holding a turn at path ("alone": a timing's, "shared": a build's) until the block ends."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, path, mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.poll() is None:
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.wait(60)


def test_a_timing_has_the_gpu_alone_and_builds_share_it(tmp_path):
    turns = GpuTurns(lock_path("GPU-test", str(tmp_path)))
    with turns.building():
        assert probe(turns.path, "shared") == "free"    # another build runs beside this one
        assert probe(turns.path, "alone") == "busy"     # a timing waits for it
    with turns.timing():
        assert probe(turns.path, "shared") == "busy"
        assert probe(turns.path, "alone") == "busy"
    assert probe(turns.path, "alone") == "free"


def test_a_timing_inside_a_build_converts_the_lock_and_gives_the_build_turn_back(tmp_path):
    turns = GpuTurns(lock_path("GPU-nested", str(tmp_path)))
    with turns.building():
        with turns.timing():          # would wait for itself with a second lock of its own
            assert probe(turns.path, "shared") == "busy"
            with turns.building():    # a build's turn inside a timing's keeps the GPU alone
                assert probe(turns.path, "shared") == "busy"
            assert probe(turns.path, "shared") == "busy"
        assert probe(turns.path, "shared") == "free"
        assert probe(turns.path, "alone") == "busy"
    assert probe(turns.path, "alone") == "free"


def test_a_process_that_dies_holding_a_timing_leaves_the_gpu_free(tmp_path):
    path = lock_path("GPU-dies", str(tmp_path))
    with held_elsewhere(path, "alone") as proc:
        assert probe(path, "shared") == "busy"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
        assert probe(path, "alone") == "free"


def test_a_timing_waits_for_another_process_build_and_counts_the_wait(tmp_path, caplog):
    turns = GpuTurns(lock_path("GPU-wait", str(tmp_path)))
    waiting, timed = threading.Event(), threading.Event()

    class Seen(logging.Handler):
        def emit(self, record):
            if "waiting for this GPU's turn" in record.getMessage():
                waiting.set()

    seen = Seen(logging.DEBUG)
    logger = logging.getLogger("aitune_ray.measure.turns")
    logger.addHandler(seen)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with held_elsewhere(turns.path, "shared") as proc:
            def time_it():
                with turns.timing():
                    timed.set()

            thread = threading.Thread(target=time_it)
            thread.start()
            assert waiting.wait(60)           # it found the GPU busy and waits
            assert not timed.is_set()
            proc.stdin.write("\n")            # the other build ends
            proc.stdin.flush()
            assert timed.wait(60)
            thread.join(60)
    finally:
        logger.removeHandler(seen)
        logger.setLevel(old_level)
    assert turns.waited_s > 0


def test_turns_are_no_ops_on_the_cpu_and_where_the_gpu_is_not_shared():
    assert turns_for(torch.device("cpu"), shared=True) is NO_TURNS
    assert turns_for(torch.device("cuda", 0), shared=False) is NO_TURNS


def test_a_candidate_builds_and_checks_in_a_build_turn_and_is_profiled_in_a_timing_turn(tmp_path):
    """run_candidate with turns: what the backend does, and in whose turn."""
    seen: list[str] = []
    state = {"turn": None}

    class Recording:
        waited_s = 0.0

        @contextlib.contextmanager
        def _turn(self, name):
            seen.append(f"{name} begins")
            state["turn"] = name
            try:
                yield
            finally:
                state["turn"] = None
                seen.append(f"{name} ends")

        def building(self):
            return self._turn("build")

        def timing(self):
            return self._turn("timing")

    class Watched(FastBackend):
        def _build(self, module, samples, device, workdir):
            seen.append(f"_build in {state['turn']}")
            super()._build(module, samples, device, workdir)

        def _infer(self, x):
            where = f"infer in {state['turn']}"
            if not seen or seen[-1] != where:
                seen.append(where)
            return super()._infer(x)

    class Affine(torch.nn.Module):
        scale, bias = 2.0, 1.0

        def forward(self, x):
            return x * self.scale + self.bias

    x = torch.ones(2, 3)
    samples = SampleStore([Sample((x,), {}, x * 2 + 1, 2)])
    backend = Watched(HelperConfig(tag="watched"))
    job = CandidateJob(key="watched", spec=backend.spec(),
                       measure=MeasureConfig(min_runs=2, max_runs=2, warmup_runs=1, latency_runs=0).to_dict())
    result, built = run_candidate(job, Affine(), samples, torch.device("cpu"), tmp_path, turns=Recording())
    assert result.status == "ok", result.error
    assert built is not None
    assert seen[:4] == ["build begins", "_build in build", "infer in build", "build ends"]   # build, check
    assert seen[4:] == ["timing begins", "infer in timing", "timing ends"]                   # profile


@pytest.mark.parametrize("share, per_gpu", [(1.0, 1), (0.5, 2), (0.25, 4)])
def test_an_actor_that_shares_its_gpu_compiles_on_its_share_of_the_cpus(monkeypatch, share, per_gpu):
    import actors.setup as setup

    monkeypatch.setattr(setup, "_node_gpus", lambda node_id: 2)
    monkeypatch.setattr(setup.os, "cpu_count", lambda: 32)
    assert setup.compile_share("node", share) == 32 // (2 * per_gpu)


@pytest.mark.gpu
def test_on_a_gpu_the_turns_are_named_by_its_uuid_and_bind_other_processes():
    device = torch.device("cuda", 0)
    turns = turns_for(device, shared=True)
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    assert isinstance(turns, GpuTurns) and uuid.replace("-", "") in turns.path.replace("-", "")
    assert turns_for(device, shared=True) is turns            # one per GPU in a process
    with turns.timing():
        assert probe(turns.path, "shared") == "busy"
    assert probe(turns.path, "alone") == "free"


def test_a_worker_on_a_shared_gpu_times_forge_benchmarks_in_turn_but_never_holds_the_gpu_for_a_generator(
        tmp_path, monkeypatch):
    """A kernel generator may run for hours beside the builds: it takes no turn; a provider benchmark takes a
    timing's."""
    from aitune_ray.worker import core as worker_module
    from aitune_ray.worker.core import Worker

    turns = GpuTurns(lock_path("GPU-forge", str(tmp_path)))
    monkeypatch.setattr(worker_module, "turns_for", lambda device, shared: turns if shared else NO_TURNS)
    worker = Worker(tmp_path / "work", shares_gpu=True)
    seen = {}

    def task(name):
        def run(box, device, *args):
            seen[name] = probe(turns.path, "alone")
            return {}
        return run

    for name in ("generate", "benchmark"):
        monkeypatch.setattr(worker.forge, name, task(name))
        worker.forge_task(name, ("token", None), torch.device("cpu"))
    assert seen == {"generate": "free", "benchmark": "busy"}
