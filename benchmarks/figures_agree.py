"""Do the figures agree? The README's main job inline, with `--executor ray`, and a user's own loop, side by side.

    python benchmarks/figures_agree.py --out OUT/agree.md
    python benchmarks/figures_agree.py --threads 1 --loops 30 --out OUT/agree.md

Runs `aitune-ray tune examples/mlp/job.yaml` twice, each a process of its own with the serving context set in
the job (`serving_threads`, default: this process's torch thread count): once inline, once with
`--executor ray`. From each run's report it reads the chosen backend, the decision's speedup over the recorded
call mix with its interval, where it says the figures hold ("cpu with 2 torch threads") and what its as-loaded
check said. Then a user's loop, in this process, in that same context (torch.set_num_threads, the calling
thread): the inline run's checkpoint loaded into a fresh model with ait.load, and eager, each called over the
job's data N times back to back (one pass: every recorded item once), one synchronize on a GPU, read with a
wall clock; eager and tuned alternate, --loops pairs, and the interval is that of the median paired ratio (the
decision's statistic). The job's `device: auto` tunes on the GPU where there is one; the loop runs where the
job tuned (--device, default: cuda where there is one).

The question: do the three intervals overlap (or does a run say the host was unfit and keep eager)?
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))   # results_table.py
sys.path.insert(0, str(ROOT))

from results_table import publish, span as text_of  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402

JOB = ROOT / "examples" / "mlp" / "job.yaml"


def job_of(width: int | None, blocks: int | None, batch_sizes: str | None = None) -> dict:
    """The README's job, its model (and data) made wider or deeper, its batch sizes others ("64,256"), where
    asked."""
    job = yaml.safe_load(JOB.read_text())
    if batch_sizes:
        job["data_args"]["batch_sizes"] = [int(b) for b in batch_sizes.split(",")]
    if width:
        job["model_args"]["width"] = job["data_args"]["width"] = width
    if blocks:
        job["model_args"]["blocks"] = blocks
    return job


def run_job(executor: str, threads: int, folder: Path, job: dict) -> dict:
    """One `aitune-ray tune` process on job with serving_threads and outputs in folder."""
    job = dict(job)
    job.update(serving_threads=threads, output=str(folder / f"{executor}.ait"), report=str(folder / f"{executor}.md"))
    path = folder / f"{executor}.yaml"
    path.write_text(yaml.safe_dump(job))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "aitune_ray", "tune", str(path), "--executor", executor],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    out = {"executor": executor, "exit": done.returncode, "wall_s": round(wall, 1), "checkpoint": job["output"]}
    report = folder / f"{executor}.json"
    if not report.exists():
        out["error"] = (done.stderr or done.stdout)[-2000:]
        return out
    data = json.loads(report.read_text())
    module = data["report"]["modules"][0]
    chosen = module.get("chosen")
    out.update(chosen=(next((r["backend"] for r in module["results"] if r["key"] == chosen), chosen)
                       if chosen else "eager"),
               decision=module.get("decision", ""), measured_in=module.get("measured_in", ""),
               interval=(module.get("verdicts", {}).get(chosen) or {}).get("interval") if chosen else None,
               as_loaded=((data.get("checkpoint_check") or {}).get("deployed") or {}).get(module["module"]))
    return out


def paired_loops(eager, tuned, items: list, calls: int, loops: int, device: str) -> dict:
    """A user's loop: each model called over items `calls` times back to back, one synchronize (on a GPU),
    read with a wall clock on this thread; three warm-up loops each, then `loops` alternating pairs. The
    interval of the median paired ratio (the decision's statistic)."""
    from aitune_ray.measure.statistics import paired_interval

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)

    def loop(model) -> float:
        sync()
        started = time.perf_counter()
        for _ in range(calls):
            for x in items:
                model(x)
        sync()
        return (time.perf_counter() - started) * 1e3 / calls

    with torch.no_grad():
        for model in (eager, tuned):   # warm: compiled graphs built, caches filled
            for _ in range(3):
                loop(model)
        times = {"eager": [], "tuned": []}
        for i in range(loops):
            for name in (("eager", "tuned") if i % 2 == 0 else ("tuned", "eager")):
                times[name].append(loop(eager if name == "eager" else tuned))
    span = paired_interval({0: times["eager"]}, {0: times["tuned"]}, {0: 1}, 0.95)
    return {"median": span.median, "low": span.low, "high": span.high}


def user_loop(checkpoint: str, threads: int, calls: int, loops: int, device: str, job: dict) -> dict:
    """Eager and the loaded checkpoint on device in a user's loop over the job's data (paired_loops), with
    `threads` torch threads."""
    import aitune_ray as ait
    from examples.mlp.model import make_data, make_model

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = [x.to(device) for x in make_data(**job["data_args"])]
        eager = make_model(**job["model_args"]).eval().to(device)
        tuned = ait.load(ait.Module(make_model(**job["model_args"]).eval().to(device), "mlp"), checkpoint)
        found = paired_loops(eager, tuned, data, calls, loops, device)
        return {"threads": torch.get_num_threads(), "calls": calls, "loops": loops, "device": device,
                "backend": tuned.backend.name if tuned.backend is not None else "eager",
                "interval": found}
    finally:
        torch.set_num_threads(before)


def overlap(a: dict | None, b: dict | None, tolerance: float) -> bool | None:
    """Whether two figures agree as the library judges a check against a decision (decision.agreement): their
    intervals overlap, or lie apart by less than the rule's noise tolerance."""
    from aitune_ray.decision.agreement import within

    if not a or not b:
        return None
    return within(a, b, tolerance)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="serving torch threads")
    parser.add_argument("--calls", type=int, default=20, help="passes over the data per loop timing")
    parser.add_argument("--loops", type=int, default=30, help="alternating eager / tuned loop pairs")
    parser.add_argument("--executors", default="inline,ray")
    parser.add_argument("--width", type=int, help="the MLP's width (the job's: 64)")
    parser.add_argument("--blocks", type=int, help="the MLP's blocks (the job's: 4)")
    parser.add_argument("--batch-sizes", help="the recorded batch sizes, e.g. 64,256 (the job's: 4,16)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the job tunes (its device: auto) and the user's loop runs")
    parser.add_argument("--out", help="write the table here (and its JSON record beside it)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="figures-agree-"))
    job = job_of(args.width, args.blocks, args.batch_sizes)
    runs = [run_job(executor, args.threads, folder, job) for executor in args.executors.split(",")]
    loaded = next((r["checkpoint"] for r in runs if r.get("chosen") not in (None, "eager") and r["exit"] == 0), None)
    loop = user_loop(loaded, args.threads, args.calls, args.loops, args.device, job) if loaded else None
    kept = [r for r in runs if r.get("chosen") == "eager"]
    intervals = [r.get("interval") for r in runs if r.get("interval")] + ([loop["interval"]] if loop else [])
    from aitune_ray.decision.rule import Rule

    tolerance = job["strategy"].get("noise_tolerance", Rule().noise_tolerance)
    agree = all(overlap(a, b, tolerance) for i, a in enumerate(intervals) for b in intervals[i + 1:]) \
        if intervals else None
    kind = torch.device(args.device).type
    lines = [f"The README's main job (examples/mlp/job.yaml, model {job['model_args']}), serving context: {kind} "
             f"with {args.threads} torch thread(s)", "",
             "| where | chosen | speedup over the mix [95% interval] | measured in | as loaded | wall s |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        loaded_check = (r.get("as_loaded") or {}).get("reason", "-") if r.get("as_loaded") else "-"
        lines.append(f"| {r['executor']} | {r.get('chosen', 'failed: ' + r.get('error', '')[:80])} | "
                     f"{text_of(r.get('interval'))} | {r.get('measured_in', '')} | {loaded_check} | {r['wall_s']} |")
    if loop:
        lines.append(f"| user's loop ({loop['calls']} passes x {loop['loops']} pairs, {loop['threads']} threads) | "
                     f"{loop['backend']} | {text_of(loop['interval'])} | {kind} with {loop['threads']} torch threads | "
                     f"- | - |")
    verdict = (f"every interval agrees with the others (they overlap, or lie apart by less than the rule's noise "
               f"tolerance, {tolerance:.0%})" if agree else
               "the intervals do NOT all agree" if agree is False else "nothing to compare")
    if kept:
        verdict += f"; kept eager in: {', '.join(r['executor'] for r in kept)}"
    lines += ["", f"Answer: {verdict}."]
    for r in runs:   # the record names no folder of this machine
        r["checkpoint"] = Path(r["checkpoint"]).name
    publish("\n".join(lines), args.out, {"threads": args.threads, "device": kind, "model_args": job["model_args"],
                                         "batch_sizes": job["data_args"]["batch_sizes"], "runs": runs,
                                         "user_loop": loop, "tolerance": tolerance,
                                         "overlap": agree}, "figures_agree")


if __name__ == "__main__":
    main()
