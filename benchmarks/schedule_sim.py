"""A SIMULATION of how a tuning job's candidates would be scheduled on 1, 2, 4 and 8 GPUs.

    python benchmarks/ray_vs_inline.py --model mlp --backends onnx,ao-int8wo --gpus 2 --out run.md
    python benchmarks/schedule_sim.py run.json [--gpus 1,2,4,8] [--overhead S] [--times inline|ray]

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", help="the .json written by ray_vs_inline.py --out")
    parser.add_argument("--gpus", default="1,2,4,8", help="comma list of GPU counts")
    parser.add_argument("--overhead", type=float, default=None,
                        help="fixed overhead in seconds (default: the measured Ray overhead in the file)")
    parser.add_argument("--serial", type=float, default=None,
                        help="serial part in seconds (default: inline wall minus the inline candidates' total)")
    parser.add_argument("--times", default=None, choices=["inline", "ray"],
                        help="whose per-candidate times to schedule (default: inline's, else Ray's)")
    args = parser.parse_args()
    data = json.loads(Path(args.json).read_text())
    args.times = args.times or ("inline" if "inline" in data else "ray")
    print(table(data, [int(n) for n in args.gpus.split(",")], args.overhead, args.serial, args.times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
