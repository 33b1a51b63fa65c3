"""A SIMULATION of how a tuning job's candidates would be scheduled on 1, 2, 4 and 8 GPUs (ray_vs_inline.py's
JSON), or of a whole job's tasks as one schedule on 1, 8, 64 and 512 GPUs (pipeline_schedule.py's JSON).

    python benchmarks/ray_vs_inline.py --model mlp --backends onnx,ao-int8wo --gpus 2 --out run.md
    python benchmarks/schedule_sim.py run.json [--gpus 1,2,4,8] [--overhead S] [--times inline|ray]
    python benchmarks/pipeline_schedule.py --out pipeline.json
    python benchmarks/schedule_sim.py pipeline.json [--gpus 1,8,64,512] [--modules 6] [--scale 100]

A job's tasks (pipeline_schedule.py): each module's eager baseline, builds and re-measure with their
recorded seconds, the module copied --scale times over (a job of many models). Three ways are placed:
the job's one schedule (every module's tasks in one queue, timing calls first, builds longest first, a
module's re-measure once its own builds and baseline are done), one module at a time (each module's tasks
on all GPUs, the modules one after another), and the critical path (the longest module's baseline or
longest build, then its re-measure). Beside each, what would limit the one schedule on that many GPUs: the
driver's one loop (--dispatch-ms per task), the object store (each module's model and samples, --module-mb,
fetched once by every actor that builds it, through --store-gbps) and the actors' start (--actor-start-s
each, --start-concurrency at once).

A file with only a Ray run (no inline run) works too: the Ray run's times are scheduled, and inline is
estimated as the candidates one after another (plus --serial).

It reads the .json that ray_vs_inline.py writes beside its --out file, takes each candidate's measured
time (inline by default: one candidate at a time, nothing else running) and places the candidates on N
GPUs in two ways:

- first-come (list scheduling): in the job's order, each candidate goes to the GPU that frees up first,
  which is what the Ray executor's dispatch does;
- longest-first: the same, with the candidates sorted by their measured time, longest first (MaxThroughput
  orders its jobs by each backend's build-cost estimate, which approximates this).

Modules are tuned one after another, so each module's candidates are scheduled on their own and the
modules' times add up. The simulated wall time is

    fixed overhead (default: Ray start + actors up, as measured) + serial part (the inline wall time
    outside the candidates: recording, eager baseline, decision) + the modules' schedules,

and is compared with the measured inline wall time (speedup, efficiency = speedup / N) and with the
critical path (each module's longest candidate, summed), which no number of GPUs gets under. Nothing is
measured here: the candidates' times are assumed not to change when they run side by side on one node.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def list_schedule(times: list[float], gpus: int) -> tuple[float, list[float]]:
    """Place times in the given order, each on the GPU that is free first (lowest index on a tie).

    Returns (makespan, busy time per GPU)."""
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    free = [0.0] * gpus
    for t in times:
        gpu = min(range(gpus), key=lambda i: (free[i], i))
        free[gpu] += t
    return max(free), free


def longest_first(times: list[float], gpus: int) -> tuple[float, list[float]]:
    """List scheduling with the longest candidate first."""
    return list_schedule(sorted(times, reverse=True), gpus)


def phases(data: dict, source: str = "inline") -> dict[str, list[float]]:
    """Each module's candidate times in the job's order (the inline run's order, else the Ray run's), from
    source's run."""
    base = data.get("inline") or data["ray"]
    run = data[source]
    order = base.get("modules") or {"model": list(base["candidates"])}
    out = {}
    for module, ids in order.items():
        times = []
        for ident in ids:
            entry = run["candidates"].get(ident)
            if entry is None:
                raise ValueError(f"candidate {ident} of {module} has no time in the {source} run")
            times.append(float(entry[2]))
        out[module] = times
    return out


def simulate(data: dict, gpus: int, overhead_s: float | None = None, serial_s: float | None = None,
             source: str = "inline") -> dict:
    """One row of the simulation for gpus GPUs (all times in seconds)."""
    per_module = phases(data, source)
    inline = data.get("inline")
    total = sum(sum(t) for t in per_module.values())
    if overhead_s is None:
        overhead_s = float(data.get("ray", {}).get("overhead_s") or 0.0)
    if serial_s is None:
        if inline is not None:
            inline_total = sum(float(c[2]) for c in inline["candidates"].values())
            serial_s = max(0.0, float(inline["wall_s"]) - inline_total)
        else:
            serial_s = 0.0
    first = sum(list_schedule(t, gpus)[0] for t in per_module.values())
    longest = sum(longest_first(t, gpus)[0] for t in per_module.values())
    critical = sum(max(t, default=0.0) for t in per_module.values())
    fixed = overhead_s + serial_s
    wall_first, wall_longest = fixed + first, fixed + longest
    # Without an inline run, inline is estimated as its serial part plus every candidate one after another.
    measured = float(inline["wall_s"]) if inline is not None else serial_s + total
    return {"gpus": gpus, "candidate_total_s": total, "overhead_s": overhead_s, "serial_s": serial_s,
            "first_come_s": wall_first, "longest_first_s": wall_longest,
            "speedup_first_come": measured / wall_first, "speedup_longest_first": measured / wall_longest,
            "efficiency_first_come": measured / wall_first / gpus,
            "efficiency_longest_first": measured / wall_longest / gpus,
            "critical_path_s": critical,
            "ratio_first_come": wall_first / critical if critical else float("inf"),
            "ratio_longest_first": wall_longest / critical if critical else float("inf")}


def table(data: dict, gpu_counts: list[int], overhead_s: float | None, serial_s: float | None,
          source: str) -> str:
    rows = [simulate(data, n, overhead_s, serial_s, source) for n in gpu_counts]
    first = rows[0]
    modules = list(phases(data, source))
    title = (f"### SIMULATION (not measured): {data.get('model', '?')} on {data.get('device', '?')}, "
             f"{sum(len(t) for t in phases(data, source).values())} candidates"
             + (f" in {len(modules)} modules ({', '.join(modules)}), tuned one after another" if len(modules) > 1
                else ""))
    lines = [title, "",
             f"Candidate times from the {source} run (total {first['candidate_total_s']:.1f} s); fixed overhead "
             f"{first['overhead_s']:.1f} s; serial part {first['serial_s']:.1f} s; "
             + (f"measured inline wall {float(data['inline']['wall_s']):.1f} s" if "inline" in data else
                f"no inline run: inline estimated as serial part + candidate total = "
                f"{first['serial_s'] + first['candidate_total_s']:.1f} s")
             + ". Simulated wall = overhead + serial part + schedule.", "",
             "| GPUs | simulated wall s, first-come / longest-first | speedup over "
             + ("measured" if "inline" in data else "estimated") + " inline | "
             "efficiency (speedup / GPUs) | critical path s | simulated wall / critical path |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['first_come_s']:.1f} / {r['longest_first_s']:.1f} | "
                     f"{r['speedup_first_come']:.2f}x / {r['speedup_longest_first']:.2f}x | "
                     f"{r['efficiency_first_come']:.0%} / {r['efficiency_longest_first']:.0%} | "
                     f"{r['critical_path_s']:.1f} | {r['ratio_first_come']:.2f}x / {r['ratio_longest_first']:.2f}x |")
    ray = data.get("ray") or {}
    if "wall_s" in ray:
        lines += ["", f"Measured for comparison: Ray wall {float(ray['wall_s']):.1f} s on "
                      f"{data.get('gpus', '?')} GPU(s)."]
    if "inline" not in data:
        lines += ["", "Without an inline run, first-come follows the Ray run's finishing order, not the job's."]
    lines += ["", "Simulation only: it assumes each candidate takes the same time side by side as it did alone."]
    return "\n".join(lines)


# ----- a job's tasks as one schedule (pipeline_schedule.py's JSON) ---------------------------------------
def job_modules(data: dict, modules: str | None, scale: int) -> list[dict]:
    """[{"baseline": s, "builds": [s, ...], "remeasure": s}] per module, from the recorded tasks of the run
    with that many modules (default: the largest), repeated scale times."""
    runs = data["tasks"]
    tasks = runs[modules] if modules else runs[max(runs, key=int)]
    by_module: dict[str, dict] = {}
    for t in tasks:
        entry = by_module.setdefault(t["module"], {"baseline": 0.0, "builds": [], "remeasure": 0.0})
        if t["task"] == "build":
            entry["builds"].append(float(t["seconds"]))
        elif t["task"] in ("baseline", "remeasure"):
            entry[t["task"]] += float(t["seconds"])
    return [dict(m, builds=list(m["builds"])) for _ in range(scale) for m in by_module.values()]


def one_schedule(modules: list[dict], gpus: int, dispatch_s: float = 0.0) -> float:
    """Event-driven list scheduling of every module's tasks at once: timing calls first, then builds longest
    first; a module's re-measure is ready once its baseline and builds are done. Each dispatch holds the
    driver's one loop for dispatch_s. Returns the makespan."""
    import heapq

    free = [(0.0, g) for g in range(gpus)]
    heapq.heapify(free)
    ready = [(0, 0.0, i, "baseline") for i, _ in enumerate(modules)]
    ready += [(1, -b, i, "build") for i, m in enumerate(modules) for b in m["builds"]]
    left = {i: 1 + len(m["builds"]) for i, m in enumerate(modules)}   # tasks before the re-measure
    done_at = {i: 0.0 for i in range(len(modules))}
    running: list[tuple[float, int, str]] = []
    loop, end = 0.0, 0.0
    while ready or running:
        ready.sort()
        while ready and free:
            at, gpu = heapq.heappop(free)
            kind, neg, i, what = ready.pop(0)
            seconds = -neg if what == "build" else modules[i][what]
            start = max(at, loop, _ready_at(done_at, i, what))
            loop = start + dispatch_s
            heapq.heappush(running, (start + seconds, i, what))
            heapq.heappush(free, (start + seconds, gpu))
            if what == "remeasure":
                end = max(end, start + seconds)
        if not running:
            break
        finish, i, what = heapq.heappop(running)
        if what != "remeasure":
            left[i] -= 1
            done_at[i] = max(done_at[i], finish)
            if left[i] == 0:
                ready.append((0, 0.0, i, "remeasure"))
        end = max(end, finish)
    return end


def _ready_at(done_at: dict, module: int, what: str) -> float:
    return done_at[module] if what == "remeasure" else 0.0


def limits(modules: list[dict], gpus: int, args) -> dict:
    tasks = sum(2 + len(m["builds"]) for m in modules)
    actors = gpus
    return {"driver_s": tasks * args.dispatch_ms / 1000.0,
            "object_store_s": len(modules) * min(actors, max(len(m["builds"]) for m in modules) + 2)
            * args.module_mb / 1000.0 / args.store_gbps,
            "actor_start_s": -(-actors // args.start_concurrency) * args.actor_start_s}


def job_table(data: dict, args) -> str:
    modules = job_modules(data, args.modules, args.scale)
    counts = [int(n) for n in args.gpus.split(",")]
    critical = max(max([m["baseline"], *m["builds"]]) + m["remeasure"] for m in modules)
    lines = [f"### SIMULATION (not measured): {len(modules)} modules' recorded tasks "
             f"({sum(len(m['builds']) for m in modules)} builds) from {data.get('script', '?')}, "
             f"{data.get('date', '?')}", "",
             "| GPUs | one schedule s | one module at a time s | critical path s | driver loop s | object store s "
             "| actor start s | estimated wall s | over critical path | what limits it |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for gpus in counts:
        together = one_schedule(modules, gpus, args.dispatch_ms / 1000.0)
        serial = sum(one_schedule([m], gpus, args.dispatch_ms / 1000.0) for m in modules)
        lim = limits(modules, gpus, args)
        parts = {"the tasks on the GPUs": together, "the driver's loop": lim["driver_s"],
                 "the object store": lim["object_store_s"]}
        bound = max(parts, key=parts.get)
        wall = parts[bound] + lim["actor_start_s"]
        if lim["actor_start_s"] > parts[bound]:
            bound = "the actors' start"
        lines.append(f"| {gpus} | {together:.1f} | {serial:.1f} | {critical:.1f} | {lim['driver_s']:.1f} | "
                     f"{lim['object_store_s']:.1f} | {lim['actor_start_s']:.1f} | {wall:.1f} | "
                     f"{wall / critical:.1f}x | {bound} |")
    lines += ["", f"Limits as modelled: the driver's one loop at {args.dispatch_ms:g} ms per task (also inside the "
              f"schedule's column); each module's {args.module_mb:g} MB fetched by every actor that builds or times "
              f"it, through {args.store_gbps:g} GB/s of object store; {args.actor_start_s:g} s per actor start, "
              f"{args.start_concurrency} at once. Estimated wall: the largest of the schedule, the driver's loop and "
              "the object store, plus the actors' start.",
              "Simulation only: each task is assumed to take on N GPUs what it took when recorded."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", help="the .json written by ray_vs_inline.py --out or pipeline_schedule.py")
    parser.add_argument("--modules", default=None, help="pipeline JSON: the run with this many modules")
    parser.add_argument("--scale", type=int, default=1, help="pipeline JSON: the modules copied this often")
    parser.add_argument("--dispatch-ms", type=float, default=5.0, help="driver time per task dispatched")
    parser.add_argument("--module-mb", type=float, default=500.0, help="a module's weights and samples")
    parser.add_argument("--store-gbps", type=float, default=10.0, help="object store bandwidth out of the driver")
    parser.add_argument("--actor-start-s", type=float, default=20.0, help="one tuner actor's start")
    parser.add_argument("--start-concurrency", type=int, default=64, help="actors Ray starts at once")
    parser.add_argument("--gpus", default="1,2,4,8", help="comma list of GPU counts")
    parser.add_argument("--overhead", type=float, default=None,
                        help="fixed overhead in seconds (default: the measured Ray overhead in the file)")
    parser.add_argument("--serial", type=float, default=None,
                        help="serial part in seconds (default: inline wall minus the inline candidates' total)")
    parser.add_argument("--times", default=None, choices=["inline", "ray"],
                        help="whose per-candidate times to schedule (default: inline's, else Ray's)")
    args = parser.parse_args()
    data = json.loads(Path(args.json).read_text())
    if "tasks" in data:
        if args.gpus == "1,2,4,8":
            args.gpus = "1,8,64,512"
        print(job_table(data, args))
        return 0
    args.times = args.times or ("inline" if "inline" in data else "ray")
    print(table(data, [int(n) for n in args.gpus.split(",")], args.overhead, args.serial, args.times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
