"""Eager's host-bound call timed beside what a Ray job starts at the same moment; prints a table.

    python benchmarks/baseline_beside_start.py --passes 2 --out baseline_beside_start.md

On one GPU the Ray executor's driver times eager (its first timing, which decides how many candidates the
re-measure re-times) while Ray starts on a thread of the driver and the tuner actor's process imports torch
and Inductor. On an H200 that first timing of the ViT-B-sized fp16 encoder at batch 8 read a median of 3.27 ms
on Ray against 2.31 ms inline (benchmarks/README.md). This times that call as a user's loop does (bursts of
100 back-to-back calls between two synchronizes) in phases, one pass after another:

- idle;
- beside ray.init() on a thread of this process, as the executor starts a local Ray (the GIL shared);
- beside ray.init() in a separate process (the CPUs shared, not the GIL);
- beside a separate process importing torch and Inductor, as a starting actor does;
- idle again.

Per phase: the median ms per call of the bursts taken while the other work ran, and how long it ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aitune_ray.cluster.starting import Background  # noqa: E402
from host_modes import bursts, encoder_at  # noqa: E402
from publish import publish  # noqa: E402

START_RAY = ("import ray; ray.init(include_dashboard=False, log_to_driver=False, num_gpus=0,"
             " _system_config={'enable_worker_prestart': False}); ray.shutdown()")
IMPORT_COMPILER = "import torch, torch._inductor.compile_fx"


def beside(model, x, calls: int, done) -> tuple[list[float], float]:
    """Bursts until done() (at least one), and the seconds that took."""
    started, times = time.perf_counter(), []
    while not times or not done():
        times += bursts(model, x, 1, calls)[0]
    return times, time.perf_counter() - started


def ray_on_a_thread(model, x, calls: int) -> tuple[list[float], float]:
    import ray

    start = Background(lambda: ray.init(include_dashboard=False, log_to_driver=False, num_gpus=0,
                                        _system_config={"enable_worker_prestart": False}), "starting Ray")
    try:
        return beside(model, x, calls, start.done)
    finally:
        start.wait()
        ray.shutdown()
        start.release()


def in_a_process(model, x, calls: int, code: str) -> tuple[list[float], float]:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    try:
        return beside(model, x, calls, lambda: process.poll() is not None)
    finally:
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--idle-bursts", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    model, x = encoder_at(args.batch, args.calls, "baseline_beside_start.py")
    phases = {
        "idle": lambda: (bursts(model, x, args.idle_bursts, args.calls)[0], 0.0),
        "beside ray.init() on a thread (GIL shared)": lambda: ray_on_a_thread(model, x, args.calls),
        "beside ray.init() in a process": lambda: in_a_process(model, x, args.calls, START_RAY),
        "beside a process importing torch and Inductor": lambda: in_a_process(model, x, args.calls, IMPORT_COMPILER),
        "idle again": lambda: (bursts(model, x, args.idle_bursts, args.calls)[0], 0.0)}
    runs: dict[str, list[tuple[list[float], float]]] = {name: [] for name in phases}
    for _ in range(args.passes):
        for name, phase in phases.items():
            runs[name].append(phase())
    lines = [f"### Eager encoder fp16, batch {args.batch}, beside a job's start: ms per call (bursts of {args.calls} "
             f"calls; {args.passes} passes)", "", "| phase | median ms per call, per pass | bursts | the other work ran s |",
             "|---|---|---|---|"]
    for name, these in runs.items():
        lines.append(f"| {name} | {', '.join(f'{statistics.median(t):.2f}' for t, _ in these)} | "
                     f"{', '.join(str(len(t)) for t, _ in these)} | "
                     f"{', '.join(f'{s:.1f}' for _, s in these) if any(s for _, s in these) else '-'} |")
    publish("\n".join(lines), args.out, {name: [{"ms": t, "seconds": s} for t, s in these] for name, these in runs.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
