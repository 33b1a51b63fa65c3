"""A small deterministic tuning job for the resume tests: run as a script it tunes inline into a run folder.

    python -m tests.resume_job RUN_DIR [GATE BLOCK]

Candidates are GatedBackends tagged 1..4, built in that order; tag 1 is the fastest. With
AITUNE_TEST_BLOCK=N the build of tag N blocks (after the ones before it were journaled).
"""

from __future__ import annotations

import sys

import torch

import aitune_ray as ait
from aitune_ray.measure.timing import MeasureConfig
from tests.fault_helpers import GateConfig, GatedBackend
from tests.ray_helpers import BUSY_HOST, SlowNet

MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)
TAGS = (1, 2, 3, 4)


def make_model(delay_s: float = 0.003):
    return SlowNet(delay_s=delay_s)


def make_data():
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(bs, 8, generator=generator) for bs in (1, 4)]


def backends(gate: str = "", block: int = 0):
    """tag 1 calls the layer directly; the others add a delay, so the decision is clear. With a gate, each
    build reports to it, and the build of tag block waits there."""
    return [GatedBackend(GateConfig(tag=t, infer_delay_s=0.0 if t == 1 else 0.002, gate=gate,
                                    at="build" if t == block else "")) for t in TAGS]


def run(run_dir, executor=None, gate: str = "", block: int = 0):
    module = ait.Module(make_model(), "net", strategy=ait.MaxThroughputStrategy(backends(gate, block),
                                                                               measure_config=MEASURE,
                                                                               **BUSY_HOST))
    report = ait.tune(module, make_data(), executor=executor or ait.InlineExecutor(remeasure_rounds=3),
                      run_dir=run_dir, call_as_given=True)
    return module, report


if __name__ == "__main__":   # RUN_DIR [GATE BLOCK]: with a gate, on the Ray cluster at RAY_ADDRESS
    if len(sys.argv) > 2:
        run(sys.argv[1], ait.RayExecutor(remeasure_rounds=3), gate=sys.argv[2], block=int(sys.argv[3]))
    else:
        run(sys.argv[1])
    print("FINISHED", flush=True)
