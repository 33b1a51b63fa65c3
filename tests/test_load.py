"""Load: 20 modules x 4 candidates in one tune(), inline and on Ray with two fake GPUs. It completes, and
afterwards no actor is alive (ray.util.state), no child process and no temporary folder is left, and the
driver's memory is back within 10% of its start."""

from __future__ import annotations

import gc
import os
import resource
from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.measure.timing import MeasureConfig
from tests.fault_helpers import (alive_tuner_actors, descendants, scratch, temporaries_left,  # noqa: F401 - a fixture
                                 wait_until)
from tests.ray_helpers import FastBackend, HelperConfig, RaisingBackend, SlowNet, WeightsAotBackend

ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
MODULES = 20
MEASURE = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05)


class Pipeline(nn.Module):
    """MODULES wrapped modules called one after another."""

    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList(
            ait.Module(SlowNet(delay_s=0.001), name=f"stage{i}", strategy=ait.MaxThroughputStrategy(
                [FastBackend(HelperConfig(tag=i)), FastBackend(HelperConfig(tag=i, infer_delay_s=0.0005)),
                 WeightsAotBackend(HelperConfig(tag=i)), RaisingBackend(HelperConfig(tag=i))],
                # what is chosen does not matter here, only that something is, on any host: no timing decides
                measure_config=MEASURE).enable_performance_validation(False))
            for i in range(MODULES))

    def forward(self, x):
        for stage in self.stages:
            x = stage(x)
        return x


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def check(pipeline: Pipeline, report) -> None:
    assert len(report.modules) == MODULES and not report.failures
    for module in report.modules:
        assert sorted(r.status for r in module.results) == ["error", "ok", "ok", "ok"]
        assert module.chosen is not None
    x = torch.randn(2, 8)
    expected = x
    for stage in pipeline.stages:
        expected = stage.module.linear(expected)
    torch.testing.assert_close(pipeline(x), expected)


def run_load(executor) -> None:
    """Tune one pipeline (paying one-time costs: imports, caches), then measure memory around a second."""
    data = [torch.randn(bs, 8) for bs in (1, 4)]
    warm = Pipeline()
    check(warm, ait.tune(warm, data, executor=executor, call_as_given=True))
    del warm
    gc.collect()
    start = rss_bytes()
    pipeline = Pipeline()
    check(pipeline, ait.tune(pipeline, data, executor=executor, call_as_given=True))
    del pipeline
    gc.collect()
    assert rss_bytes() <= start * 1.10, f"driver memory grew from {start >> 20} MiB to {rss_bytes() >> 20} MiB"


@pytest.mark.slow
def test_load_inline(scratch):
    before = set(descendants(os.getpid()))
    run_load(ait.InlineExecutor(remeasure_rounds=2))
    assert set(descendants(os.getpid())) <= before
    assert not temporaries_left(scratch), f"temporary folders left: {temporaries_left(scratch)}"


@pytest.mark.slow
def test_load_on_ray(scratch, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", WORKER_PATH)
    before = set(descendants(os.getpid()))
    context = ray.init(num_cpus=2, num_gpus=2, include_dashboard=True, dashboard_port=0, log_to_driver=False)
    try:
        executor = ait.RayExecutor(remeasure_rounds=2, task_timeout_s=120)
        with executor:
            run_load(executor)
        # actors' work folders and the log folder (no candidate crashed, so no log is worth keeping)
        assert not temporaries_left(scratch), f"temporary folders left: {temporaries_left(scratch)}"
        wait_until(lambda: not alive_tuner_actors(context.dashboard_url), what="no tuner actor is alive")
    finally:
        ray.shutdown()
    wait_until(lambda: set(descendants(os.getpid())) <= before, what="no child process of this one is left")
