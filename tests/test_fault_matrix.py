"""The fault matrix on one Ray instance with two fake GPUs (RELIABILITY.md lists each case).

Faults are placed with gates (tests.fault_helpers): a backend stops in its build, its first timed call
or its re-measurement until the test has killed the process it runs in. Each case ends with a correct
checkpoint or a clear error, and leaves no tuner actor, worker process or temporary folder behind.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

import aitune_ray as ait  # noqa: E402
from aitune_ray.cluster import RayExecutor  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from aitune_ray.records.results import CRASHED  # noqa: E402
from tests import resume_job  # noqa: E402
from tests.fault_helpers import (  # noqa: E402
    GateConfig,
    GatedBackend,
    alive_tuner_actors,
    recorded_net,
    scratch,  # noqa: F401 - a fixture
    start_gate,
    temporaries_left,
    tuner_processes,
    wait_until,
)
from tests.ray_helpers import BUSY_HOST, FastBackend, HelperConfig, SlowNet, WeightsAotBackend  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)


@pytest.fixture(scope="module")
def cluster():
    """One Ray instance for the module. Its workers (also those of drivers the tests start) import this
    checkout: the raylet passes its own environment on."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = WORKER_PATH
    try:
        context = ray.init(num_cpus=2, num_gpus=2, include_dashboard=True, dashboard_port=0, log_to_driver=False)
        yield context
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture
def executor(cluster, tmp_path, scratch):
    ex = RayExecutor(task_timeout_s=120, remeasure_rounds=3, max_actor_restarts=3, log_dir=str(tmp_path / "logs"))
    ex.open()
    yield ex
    ex.close()


def assert_nothing_left(cluster, executor, scratch: Path) -> None:
    executor.close()
    gc.collect()
    wait_until(lambda: not alive_tuner_actors(cluster.dashboard_url), what="no tuner actor is alive")
    wait_until(lambda: not tuner_processes(), what=f"no tuner worker process: {tuner_processes()}")
    assert not list(Path(executor.log_dir).glob("work-actor*")), "an actor's work folder is left"
    assert not temporaries_left(scratch), f"temporary folders left: {temporaries_left(scratch)}"


def kill_on_arrival(gate) -> threading.Thread:
    """A thread that SIGKILLs the process that arrives at the gate, then lets later arrivals pass."""
    def run():
        pid, _ = ray.get(gate.wait_arrived.remote())
        os.kill(pid, signal.SIGKILL)
        ray.get(gate.release.remote())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def check_checkpoint(module: ait.Module, path: Path) -> None:
    """Save, load into a fresh model, and compare with the tuned module on new data."""
    ait.save(module, path)
    fresh = ait.load(ait.Module(SlowNet(), name="net"), path)
    x = torch.randn(3, 8)
    torch.testing.assert_close(fresh(x), module(x))
    torch.testing.assert_close(fresh(x), module.module.linear(x))


@pytest.mark.parametrize("at", ["build", "measure"])
def test_an_actor_killed_during_a_build_or_a_measurement(cluster, executor, scratch, tmp_path, at):
    gate_name = f"kill-{at}"
    gate = start_gate(gate_name)
    generations = sum(slot.generation for slot in executor.pool.slots)
    module = recorded_net(ait.MaxThroughputStrategy([
        GatedBackend(GateConfig(tag=1, gate=gate_name, at=at)), FastBackend(HelperConfig(tag=2)),
        WeightsAotBackend(HelperConfig(tag=3))], measure_config=MEASURE, **BUSY_HOST))
    killer = kill_on_arrival(gate)
    report = module.tune(executor=executor)
    killer.join()
    by_tag = {r.spec["config"]["tag"]: r for r in report.results}
    assert by_tag[1].status == CRASHED and "died" in by_tag[1].error, by_tag[1]
    assert by_tag[2].ok and by_tag[3].ok
    assert report.chosen_result().spec["config"]["tag"] in (2, 3)
    assert sum(slot.generation for slot in executor.pool.slots) == generations + 1   # replaced, once
    assert len(executor.pool.alive()) == 2
    check_checkpoint(module, tmp_path / "net.ait")
    del module, report
    ray.kill(gate)
    assert_nothing_left(cluster, executor, scratch)


def test_an_actor_killed_during_the_confirm_session_confirms_again_on_another(cluster, executor, scratch, tmp_path):
    gate = start_gate("kill-remeasure")
    module = recorded_net(ait.MaxThroughputStrategy([
        GatedBackend(GateConfig(tag=1, gate="kill-remeasure", at="remeasure")),
        FastBackend(HelperConfig(tag=2, infer_delay_s=0.002))], measure_config=MEASURE, **BUSY_HOST))
    killer = kill_on_arrival(gate)
    report = module.tune(executor=executor)
    killer.join()
    chosen = report.chosen_result()
    assert chosen.spec["config"]["tag"] == 1
    assert chosen.remeasured and report.remeasured_baseline   # a whole new session, on the replacement
    check_checkpoint(module, tmp_path / "net.ait")
    del module, report, chosen
    ray.kill(gate)
    assert_nothing_left(cluster, executor, scratch)


def driver_env(cluster) -> dict:
    return dict(os.environ, PYTHONPATH=WORKER_PATH, RAY_ADDRESS=cluster.address_info["gcs_address"])


JOB = """\
model: tests.resume_job:make_model
data: tests.resume_job:make_data
strategy: {type: MaxThroughput, measure: {warmup_runs: 1, min_runs: 5, max_runs: 20, max_seconds: 0.2}}
backends:
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 1, gate: sigint, at: build}}
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 2}}
executor: {type: ray, remeasure_rounds: 3}
device: cpu
"""


def _interruptible() -> None:
    """Ctrl-C as a terminal sends it: a process started in the background (a CI job under nohup, `cmd &`)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler; undo that in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_driver_sigint_cancels_and_writes_no_checkpoint(cluster, tmp_path):
    gate = start_gate("sigint")
    (tmp_path / "job.yaml").write_text(JOB)
    with open(tmp_path / "out.txt", "w") as out:
        driver = subprocess.Popen([sys.executable, "-m", "aitune_ray", "tune", "job.yaml"], cwd=tmp_path,
                                  env={**driver_env(cluster), "PYTHONFAULTHANDLER": "1"}, stdout=out,
                                  stderr=subprocess.STDOUT, preexec_fn=_interruptible)
        try:
            ray.get(gate.wait_arrived.remote())       # the gated build is running on an actor
            driver.send_signal(signal.SIGINT)
            try:
                rc = driver.wait(timeout=120)
            except subprocess.TimeoutExpired:
                driver.send_signal(signal.SIGABRT)     # faulthandler writes every thread's stack to the output
                driver.wait(timeout=30)
                pytest.fail("the driver did not stop within 120 s of SIGINT; its output:\n"
                            + (tmp_path / "out.txt").read_text()[-6000:])
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    text = (tmp_path / "out.txt").read_text()
    assert rc == 130, text
    assert "interrupted" in text and "Traceback" not in text
    assert not (tmp_path / "job.ait").exists()
    # no half-written file (the output's lock file, .job.ait.lock, stays by design: docs/security.md)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".job.ait") and p.name != ".job.ait.lock"]
    ray.kill(gate)
    wait_until(lambda: not alive_tuner_actors(cluster.dashboard_url), what="the driver's actors are gone")
    wait_until(lambda: not tuner_processes(), what="the driver's worker processes are gone")


def test_a_driver_killed_on_ray_resumes_with_only_the_missing_candidates(cluster, scratch, tmp_path):
    gate = start_gate("resume-ray")   # the killed driver's actors need the CPUs: no executor here before it
    run_dir = tmp_path / "run"
    driver = subprocess.Popen([sys.executable, "-m", "tests.resume_job", str(run_dir), "resume-ray", "3"],
                              cwd=ROOT, env=driver_env(cluster), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        ray.get(gate.wait_arrived.remote())           # tag 3 is building: the builds before it were dispatched
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    ray.get(gate.release.remote())
    stored = {p.stem for p in (run_dir / "net" / "results").glob("*.json")}
    before = len(ray.get(gate.builds.remote()))
    assert stored and len(stored) < 4
    executor = RayExecutor(task_timeout_s=120, remeasure_rounds=3, log_dir=str(tmp_path / "logs"))
    module, report = resume_job.run(run_dir, executor, gate="resume-ray", block=3)
    rebuilt = ray.get(gate.builds.remote())[before:]
    by_key = {r.key: r.spec["config"]["tag"] for r in report.modules[0].results}
    assert sorted(rebuilt) == sorted(tag for key, tag in by_key.items() if key not in stored)
    assert all(r.ok for r in report.modules[0].results) and len(by_key) == 4
    assert report.modules[0].chosen_result().spec["config"]["tag"] == 1
    assert report.modules[0].remeasured_baseline
    check_checkpoint(module, tmp_path / "net.ait")
    del module, report
    ray.kill(gate)
    assert_nothing_left(cluster, executor, scratch)
