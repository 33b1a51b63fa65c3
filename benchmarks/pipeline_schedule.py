"""A pipeline of 1, 3 and 6 modules tuned as one schedule on 9 fake GPUs, against one module alone and the
critical path; prints a table and writes JSON.

    python benchmarks/pipeline_schedule.py [--modules 1,3,6] [--builds 6,3,1.5] [--repeats 2] [--out FILE.json]

A local Ray with 9 logical GPUs (one actor each, no CPU reserved), actors warm (a first tuning before any
measured one). The modules are tuned for those GPUs (device "cuda", as on a GPU cluster whose driver has
none): each fake GPU is one device, so timing sessions (eager baselines, confirm sessions) of different
modules run at once on different actors, never two on one GPU; the actors, which have no CUDA, time on the
CPU in its place, and the driver, which has no GPU, skips the post-deploy check. (Tuned for the CPU, every
timing session of the node would wait for the one CPU device, as it must on a real CPU.)

Each module has one candidate per --builds entry, whose build sleeps that long (a GPU compile mostly waits)
and whose build_cost hint is those seconds (three backends of known relative costs); restoring the chosen
one on the driver loads it, without that wait (the three are equally fast: which one is chosen is chance).
The wall time of tune_modules() is measured per pipeline size (the median of --repeats), and compared with
one module alone (the same run's 1-module wall) and with the critical path: the longest build plus one
module's own work outside its builds (its 1-module wall less its longest build), which no schedule gets
under. Goal (issue 39): 3 modules within 1.3x one module, 6 within 1.6x. The JSON also keeps each run's
timeline (every progress event, seconds from the tuning's start, with its actor's GPU).

The JSON also holds every task's recorded time (module, task, seconds), which schedule_sim.py schedules on
more GPUs than this machine has.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
import torch  # noqa: E402

import aitune_ray as ait  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from aitune_ray.api.tuning import tune_modules  # noqa: E402
from tests.ray_helpers import HelperConfig, HintedBackend, SlowNet  # noqa: E402

MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)
GPUS = 9


def pipeline(count: int, builds: list[float], run: int) -> list[ait.Module]:
    modules = []
    for index in range(count):
        backends = [HintedBackend(HelperConfig(build_s=seconds, tag=1000 * run + 10 * index + j))
                    for j, seconds in enumerate(builds)]
        module = ait.Module(SlowNet(), name=f"m{index}", strategy=ait.MaxThroughputStrategy(
            backends, measure_config=MEASURE, deploy_check_rounds=5))
        with torch.no_grad():
            for bs in (1, 4):
                module(torch.randn(bs, 8))
        modules.append(module)
    return modules


def tasks_of(events: list[dict]) -> list[dict]:
    """Each ended task's module, kind and seconds (from its "done" event)."""
    return [{"module": e["module"], "task": e["task"], "key": e["key"], "seconds": e["elapsed_s"],
             "status": e["status"]} for e in events if e["event"] == "done"]


def timeline(events: list[dict], started: float) -> list[dict]:
    """Every event of a tuning, seconds from its start: when each module's task began and ended, and where."""
    return [{"t": round(e["time"] - started, 3), "module": e["module"], "task": e["task"], "event": e["event"],
             "key": e["key"], "gpu": e["gpu"], "elapsed_s": e["elapsed_s"]} for e in events]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", default="1,3,6")
    parser.add_argument("--builds", default="6,3,1.5", help="each module's build seconds (sleeps)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pipeline_schedule_cpu.json"))
    args = parser.parse_args()
    counts = [int(n) for n in args.modules.split(",")]
    builds = [float(s) for s in args.builds.split(",")]

    ray.init(address="local", num_cpus=2, num_gpus=GPUS, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    events: list[dict] = []
    executor = ait.RayExecutor(cpus_per_actor=0, warm_up="off", remeasure_rounds=5, task_timeout_s=600,
                               progress=events.append)
    walls: dict[int, list[float]] = {n: [] for n in counts}
    recorded: dict[int, list[dict]] = {}
    timelines: dict[int, list[dict]] = {}
    try:
        executor.open()
        tune_modules(pipeline(1, [0.1], run=0), device="cuda", executor=executor)   # actors up and warm
        run = 1
        for _ in range(args.repeats):
            for count in counts:
                events.clear()
                modules = pipeline(count, builds, run)
                run += 1
                started, began = time.perf_counter(), time.time()
                report = tune_modules(modules, device="cuda", executor=executor)
                walls[count].append(time.perf_counter() - started)
                assert not report.failures, report.failures
                recorded[count] = tasks_of(events)
                timelines[count] = timeline(events, began)
    finally:
        executor.close()
        ray.shutdown()

    wall = {n: statistics.median(w) for n, w in walls.items()}
    one = wall.get(1) or min(wall.values())
    critical = max(builds) + max(0.0, one - max(builds))
    goals = {3: 1.3, 6: 1.6}
    rows = []
    for count in counts:
        rows.append({"modules": count, "builds": count * len(builds), "wall_s": round(wall[count], 2),
                     "walls_s": [round(w, 2) for w in walls[count]], "over_one_module": round(wall[count] / one, 3),
                     "over_critical_path": round(wall[count] / critical, 3), "goal": goals.get(count),
                     "met": wall[count] / one <= goals[count] if count in goals else None})
    print(f"### A pipeline of modules as one schedule on {GPUS} fake GPUs (CPU, builds sleep "
          f"{', '.join(f'{s:g}' for s in builds)} s; actors warm; median of {args.repeats})\n")
    print("| modules | builds | wall s (runs) | over one module | over the critical path | goal |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        goal = f"<= {r['goal']}x: {'met' if r['met'] else 'NOT met'}" if r["goal"] else ""
        print(f"| {r['modules']} | {r['builds']} | {r['wall_s']:.1f} ({', '.join(f'{w:.1f}' for w in r['walls_s'])}) | "
              f"{r['over_one_module']:.2f}x | {r['over_critical_path']:.2f}x | {goal} |")
    print(f"\nCritical path {critical:.1f} s: the longest build ({max(builds):g} s) plus one module's work outside "
          f"its builds ({max(0.0, one - max(builds)):.1f} s: eager baseline, confirm session, decision).")
    out = {"script": "benchmarks/pipeline_schedule.py", "command": " ".join(sys.argv),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {GPUS} fake GPUs (CPU)",
           "builds_s": builds, "critical_path_s": round(critical, 2), "rows": rows,
           "tasks": {str(n): t for n, t in recorded.items()},
           "timelines": {str(n): t for n, t in timelines.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
