"""A user backend whose build crashes, aborts or hangs on purpose, and a small job around it, for the tests
of contained inline builds and of resuming after a build took the driver down.

    python -m tests.crash_backends RUN_DIR CONTAIN     tune inline (CONTAIN: 1 or 0) into RUN_DIR; prints
                                                       each candidate's status as one JSON line

Candidates are CrashingBackends tagged 1..3; tag 2 segfaults in its build. AITUNE_TEST_BUILD_LOG names a
file where each build (not a restore) appends its tag before it does anything else. A build of how="helper"
starts a helper process (one that would sleep 10 minutes), writes its pid to the file AITUNE_TEST_HELPER_PID
names, and hangs.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import subprocess
import sys
import threading

import torch

import aitune_ray as ait
from aitune_ray.measure.timing import MeasureConfig
from tests.ray_helpers import FastBackend, HelperConfig, SlowNet

MEASURE = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_seconds=0.1)


@dataclasses.dataclass
class CrashConfig(HelperConfig):
    """how: "segfault" (reads address 0), "abort" (SIGABRT), "hang" (waits for an event that never comes),
    "helper" (starts a helper process, then hangs) or "" (builds like FastBackend)."""

    how: str = ""


class CrashingBackend(FastBackend):
    config_class = CrashConfig

    def _build(self, module, samples, device, workdir):
        log = os.environ.get("AITUNE_TEST_BUILD_LOG")
        if log and len(samples):   # a restore rebuilds without samples: not counted
            with open(log, "a") as out:
                out.write(f"{self.config.tag}\n")
        if self.config.how == "segfault":
            ctypes.string_at(0)
        elif self.config.how == "abort":
            os.abort()
        elif self.config.how == "hang":
            threading.Event().wait()
        elif self.config.how == "helper":
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(os.environ["AITUNE_TEST_HELPER_PID"] + ".part", "w") as out:
                out.write(str(helper.pid))
            os.replace(os.environ["AITUNE_TEST_HELPER_PID"] + ".part", os.environ["AITUNE_TEST_HELPER_PID"])
            threading.Event().wait()
        super()._build(module, samples, device, workdir)


def make_data():
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(bs, 8, generator=generator) for bs in (1, 4)]


def run(backends, executor, run_dir=None):
    module = ait.Module(SlowNet(delay_s=0.001), "net", strategy=ait.MaxThroughputStrategy(
        backends, measure_config=MEASURE))
    return module, ait.tune(module, make_data(), executor=executor, run_dir=run_dir, call_as_given=True)


if __name__ == "__main__":
    job = [CrashingBackend(CrashConfig(tag=1)), CrashingBackend(CrashConfig(tag=2, how="segfault")),
           CrashingBackend(CrashConfig(tag=3))]
    _, report = run(job, ait.InlineExecutor(remeasure_rounds=2, contain=sys.argv[2] == "1"), sys.argv[1])
    print(json.dumps({r.key: r.status for r in report.modules[0].results}), flush=True)
