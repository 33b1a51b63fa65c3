"""Inline builds: contained in child processes (a segfault, an abort, a hang cost one candidate), and a
resume after a build took an uncontained driver down records that build as crashed instead of repeating it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import aitune_ray as ait
from aitune_ray.records.results import CRASHED, OK, TIMED_OUT
from tests.crash_backends import CrashConfig, CrashingBackend, run

ROOT = Path(__file__).resolve().parent.parent


def test_a_segfault_and_an_abort_in_contained_builds_cost_one_candidate_each():
    backends = [CrashingBackend(CrashConfig(tag=1, how="segfault")), CrashingBackend(CrashConfig(tag=2, how="abort")),
                CrashingBackend(CrashConfig(tag=3))]
    module, report = run(backends, ait.InlineExecutor(remeasure_rounds=2, contain=True))
    got = {r.spec["config"]["tag"]: r for r in report.modules[0].results}
    assert got[1].status == CRASHED and "SIGSEGV" in got[1].error, got[1].error
    assert "Segmentation fault" in Path(got[1].log_path).read_text()   # faulthandler's stack in its log
    assert got[2].status == CRASHED and "SIGABRT" in got[2].error, got[2].error
    assert got[3].status == OK
    assert not report.failures and module(ait_input()).shape == (2, 8)   # this process lives on, tuned


def ait_input():
    import torch

    return torch.randn(2, 8)


def test_a_hanging_contained_build_times_out():
    backends = [CrashingBackend(CrashConfig(tag=1, how="hang")), CrashingBackend(CrashConfig(tag=2))]
    _, report = run(backends, ait.InlineExecutor(remeasure_rounds=2, contain=True, task_timeout_s=30))
    got = {r.spec["config"]["tag"]: r for r in report.modules[0].results}
    assert got[1].status == TIMED_OUT and "30 s" in got[1].error
    assert got[2].status in (OK, TIMED_OUT)   # a busy host may take 30 s to start a child: no timing assumed


def process_gone(pid: int) -> bool:
    """Whether pid has ended (a zombie waiting for its new parent to reap it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as src:
            return src.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_timed_out_contained_build_takes_the_processes_it_started_along(tmp_path, monkeypatch):
    """The build's child runs in a process group of its own, killed whole at the timeout: a helper it started
    (a compiler, say) does not live on."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads /proc")
    pid_file = tmp_path / "helper.pid"
    monkeypatch.setenv("AITUNE_TEST_HELPER_PID", str(pid_file))
    _, report = run([CrashingBackend(CrashConfig(tag=1, how="helper"))],
                    ait.InlineExecutor(remeasure_rounds=2, contain=True, task_timeout_s=30))
    assert report.modules[0].results[0].status == TIMED_OUT
    helper = int(pid_file.read_text())   # written before the build hung, so before its timeout
    try:
        deadline = time.monotonic() + 30   # SIGKILL is immediate; the bound only keeps a regression from hanging
        while not process_gone(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_gone(helper), "the helper the build started outlived the build's timeout"
    finally:
        if not process_gone(helper):
            os.kill(helper, signal.SIGKILL)


def test_a_resume_after_an_in_process_build_killed_the_driver_does_not_build_it_again(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "builds.log"
    env = dict(os.environ, AITUNE_TEST_BUILD_LOG=str(log),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    first = subprocess.run([sys.executable, "-m", "tests.crash_backends", str(run_dir), "0"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == -signal.SIGSEGV, first.stderr[-3000:]
    assert log.read_text().split() == ["1", "2"]
    again = subprocess.run([sys.executable, "-m", "tests.crash_backends", str(run_dir), "0"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert log.read_text().split() == ["1", "2", "3"]   # tag 2 was not built again
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert sorted(result.values()) == [CRASHED, OK, OK]


MAIN_SCRIPT = """
import torch
from torch import nn

import aitune_ray as ait
from tests.crash_backends import CrashConfig, CrashingBackend, MEASURE, make_data


class ScriptNet(nn.Module):   # defined in the script that runs: it travels to the build process by value
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(x)


module = ait.Module(ScriptNet(), "net", strategy=ait.MaxThroughputStrategy(
    [CrashingBackend(CrashConfig(tag=1))], measure_config=MEASURE))
report = ait.tune(module, make_data(), call_as_given=True, executor=ait.InlineExecutor(remeasure_rounds=2, contain=True))
print("STATUS", report.modules[0].results[0].status, report.modules[0].results[0].error)
"""


def test_a_module_class_of_the_running_script_is_built_contained():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-c", MAIN_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "STATUS ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
