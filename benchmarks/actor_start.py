"""What a tuner actor's start costs before its builds, for each warm-up mode (RayExecutor(warm_up=...)).

    python benchmarks/actor_start.py --modes compile,imports,off --repeats 2 --out actor_start.md

Each measurement is a fresh process with empty Inductor and Triton caches, as a new actor is. It imports
what actors/tuner.py imports, warms up in one mode (aitune_ray.warm_up), then builds the ViT-B-sized
fp16 encoder of benchmarks/backends.py with the first two backends of --backends, as an actor's Worker
does. The table shows, per mode, the warm-up and each build, and their sum: the time from the actor's
imports to its second build's end, which is what the warm-up mode changes on one GPU, where the builds
wait for the actor. Modes run in turn (ABC CBA ...), so that a drift of the machine falls on all of them.
"""

from __future__ import annotations

import sys
import time

CHILD = "--child" in sys.argv
BEGAN = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from publish import fresh_caches, publish  # noqa: E402


def child(mode: str, backends: list[str], out: str) -> None:
    """One fresh process: imports, warm-up, two builds; writes the seconds of each as JSON."""
    import torch

    import actors.tuner  # noqa: F401 - what an actor's class import costs
    from aitune_ray.warm_up import warm_up
    from aitune_ray.worker import Worker
    imported = time.perf_counter()

    from aitune_ray.measure.timing import MeasureConfig
    from aitune_ray.results import CandidateJob
    from backends import BACKENDS, recorded_encoder

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, samples = recorded_encoder(device)
    made = time.perf_counter()   # the driver's part: not the actor's

    warm = warm_up(max(2, os.cpu_count() or 2), mode)
    warmed = time.perf_counter()
    worker = Worker(Path(tempfile.mkdtemp(prefix="actor-start-")))
    worker.load("encoder", ("token",), lambda: (model, samples), device, as_is=True)
    builds = []
    for name in backends:
        mark = time.perf_counter()
        job = CandidateJob(key=name, spec=BACKENDS[name]().spec(), measure=MeasureConfig(max_seconds=1.0).to_dict())
        result = worker.run("encoder", job)
        builds.append({"backend": name, "status": result.status, "s": time.perf_counter() - mark})
    Path(out).write_text(json.dumps({
        "mode": mode, "imports_s": imported - BEGAN, "model_s": made - imported, "warm_up_s": warmed - made,
        "warm_up": {k: v for k, v in warm.items() if k.endswith("_s")}, "builds": builds,
        "warm_up_and_builds_s": time.perf_counter() - made}))


def run_child(mode: str, args) -> dict:
    out = Path(tempfile.mkdtemp(prefix="actor-start-")) / "run.json"
    env = fresh_caches(os.environ)
    cmd = [sys.executable, __file__, "--child", mode, "--child-out", str(out), "--backends", args.backends]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    if proc.returncode != 0 or not out.exists():
        print(f"{mode}: failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}", flush=True)
        return {"mode": mode, "failed": True}
    data = json.loads(out.read_text())
    data["process_s"] = time.perf_counter() - started
    builds = ", ".join(f"{b['backend']} {b['s']:.1f} s" for b in data["builds"])
    print(f"{mode}: warm-up {data['warm_up_s']:.1f} s, builds {builds}", flush=True)
    return data


def table(runs: list[dict], modes: list[str]) -> str:
    ok = [r for r in runs if not r.get("failed")]
    names = [b["backend"] for b in ok[0]["builds"]] if ok else []
    lines = ["| warm-up mode | runs | imports s | warm-up s | " + " | ".join(f"build {n} s" for n in names)
             + " | warm-up and builds s | vs compile |", "|---" * (len(names) + 6) + "|"]
    base = None
    for mode in modes:
        mine = [r for r in ok if r["mode"] == mode]
        if not mine:
            lines.append(f"| {mode} | 0 (failed) |" + " |" * (len(names) + 4))
            continue
        med = lambda values: statistics.median(values)  # noqa: E731
        total = med([r["warm_up_and_builds_s"] for r in mine])
        base = total if mode == "compile" else base
        builds = [med([r["builds"][i]["s"] for r in mine]) for i in range(len(names))]
        lines.append(f"| {mode} | {len(mine)} | {med([r['imports_s'] for r in mine]):.1f} | "
                     f"{med([r['warm_up_s'] for r in mine]):.1f} | " + " | ".join(f"{b:.1f}" for b in builds)
                     + f" | {total:.1f} | {f'{total - base:+.1f} s' if base is not None else '-'} |")
    described = []
    for mode in modes:
        parts: dict[str, list[float]] = {}
        for r in ok:
            if r["mode"] == mode:
                for part, seconds in r["warm_up"].items():
                    parts.setdefault(part, []).append(seconds)
        if parts:
            described.append(f"{mode}: " + ", ".join(f"{p} {statistics.median(v):.2f}" for p, v in sorted(parts.items())))
    lines += ["", "Warm-up parts (median s): " + "; ".join(described)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="compile,imports,off")
    parser.add_argument("--backends", default="jit-max,jit", help="the two builds, in order (benchmarks/backends.py names)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the modes (each round reverses the order)")
    parser.add_argument("--run-timeout", type=float, default=240)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.backends.split(","), args.child_out)
        return 0
    modes = args.modes.split(",")
    runs = []
    for round_ in range(args.repeats):
        for mode in modes if round_ % 2 == 0 else modes[::-1]:
            runs.append(run_child(mode, args))
    text = (f"### Actor start by warm-up mode ({args.repeats} round(s), fresh caches each)\n\n"
            + table(runs, modes))
    publish(text, args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
