"""What a Ray tuning with a kernel plan leaves behind in the driver's process; prints a table.

    python benchmarks/driver_after_plan.py --repeats 2 --out driver_after_plan.md     # on a GPU machine

A Ray driver profiles the model for a KernelSelector plan. Made in the driver itself, that CUDA trace leaves
CUPTI attached there (Kineto's teardown would hang a Ray driver at exit), and every later kernel launch in
the driver costs more: the user's own calls after tune() and the post-deploy check alike. The tuner now
makes the trace in a child process (aitune_ray/cluster/profile_process.py). This benchmark runs both ways
side by side, each in a fresh process, alternating:

- child: as shipped;
- here: the child refused, so the runner profiles in the driver, as it did before.

In each process: the ViT-B-sized fp16 encoder at batch 8 (host-bound on an H200), timed as a user's loop
(bursts of 100 back-to-back calls between two synchronizes, perf_counter; the loop's thread pinned to the
last CPU for the loop alone, the same CPU before and after) on the plain eager module before
the tuning and after it; the tuning in between is MaxThroughput over one KernelSelector candidate on a local
Ray with one actor. Per run: eager ms per call before and after (medians of the bursts, and the lowest), after / before,
whether CUPTI is attached in the driver afterwards, the profile's seconds and the tuning's wall.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS = ("child", "here")


def one(variant: str, bursts_n: int, calls: int) -> dict:
    import torch

    import aitune_ray as ait
    from aitune_ray.backend import KernelSelectorBackend
    from aitune_ray.cluster import RayExecutor
    from aitune_ray.cluster import forge
    from aitune_ray.cluster.profile_process import ProfileProcessError
    from aitune_ray.measure.conditions import cupti_attached
    from backends import make_model
    from host_modes import bursts

    model, data = make_model("encoder", torch.device("cuda"), torch.float16)
    x = torch.randn(8, *data[0].shape[1:], device="cuda", dtype=torch.float16)
    everywhere = os.sched_getaffinity(0)
    pinned = {max(everywhere)}

    def timed_loop() -> list[float]:
        # The loop's thread on one CPU, the same before and after (which CPU a host-bound call lands on moves
        # it by up to 2x on this machine; host_modes.py); the tuning's processes, started unpinned, inherit none.
        os.sched_setaffinity(0, pinned)
        try:
            bursts(model, x, 3, calls)   # warm-up
            return bursts(model, x, bursts_n, calls)[0]
        finally:
            os.sched_setaffinity(0, everywhere)

    before = timed_loop()

    if variant == "here":
        def refuse(*args, **kwargs):
            raise ProfileProcessError("the benchmark's 'here' variant profiles in the driver")
        forge.profile_in_child = refuse
        forge.ProfileChild = lambda device: None   # no child started ahead either
    profiled = []
    runner_profile = forge.RayForgeRunner.profile

    def timed(self, *args, **kwargs):
        started = time.monotonic()
        try:
            return runner_profile(self, *args, **kwargs)
        finally:
            profiled.append(time.monotonic() - started)

    forge.RayForgeRunner.profile = timed
    wrapped = ait.Module(model, "encoder", strategy=ait.MaxThroughputStrategy([KernelSelectorBackend()]))
    started = time.monotonic()
    ait.tune(wrapped, data, device="cuda", executor=RayExecutor(max_actors=1), call_as_given=True)
    tune_s = time.monotonic() - started
    after = timed_loop()   # the plain module: eager, as before the tuning
    return {"variant": variant, "cpu": min(pinned), "before_ms": statistics.median(before),
            "after_ms": statistics.median(after), "before_low_ms": min(before), "after_low_ms": min(after),
            "cupti_attached": cupti_attached(), "profile_s": sum(profiled), "tune_s": tune_s,
            "before": before, "after": after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant, alternating")
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--run-timeout", type=float, default=200.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.one, args.bursts, args.calls)), flush=True)
        return 0
    from publish import publish

    runs = []
    for _ in range(args.repeats):
        for variant in VARIANTS:
            cmd = [sys.executable, __file__, "--one", variant, "--bursts", str(args.bursts), "--calls", str(args.calls)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})
                found = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
                runs.append(json.loads(found[0]) if found else
                            {"variant": variant, "error": f"exit {proc.returncode}: {proc.stderr[-800:]}"})
            except subprocess.TimeoutExpired:
                runs.append({"variant": variant, "error": f"no result within {args.run_timeout:g} s"})
            print(json.dumps({k: v for k, v in runs[-1].items() if k not in ("before", "after")}), flush=True)
    lines = [f"### Eager encoder fp16 at batch 8 in the Ray driver, before and after a tuning with a kernel plan "
             f"(ms per call: medians of {args.bursts} bursts of {args.calls} calls)", "",
             "| run | profile made | eager before ms (lowest) | eager after ms (lowest) | after / before (lowest) | "
             "CUPTI attached after | profile s | tune s |", "|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(runs, 1):
        where = "in a child process" if run["variant"] == "child" else "in the driver"
        if "error" in run:
            lines.append(f"| {i} | {where} | failed: {run['error'][:200]} | | | | | |")
            continue
        lines.append(f"| {i} | {where} | {run['before_ms']:.2f} ({run['before_low_ms']:.2f}) | "
                     f"{run['after_ms']:.2f} ({run['after_low_ms']:.2f}) | {run['after_ms'] / run['before_ms']:.2f}x "
                     f"({run['after_low_ms'] / run['before_low_ms']:.2f}x) | {'yes' if run['cupti_attached'] else 'no'} | "
                     f"{run['profile_s']:.1f} | {run['tune_s']:.1f} |")
    publish("\n".join(lines), args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
