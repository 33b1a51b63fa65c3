"""Resume a killed job: a cold run against a run killed (SIGKILL) half-way and then resumed; prints a table.

    python benchmarks/resume.py --out OUT/resume.md
    python benchmarks/resume.py --executor ray --device cuda --out OUT/resume.md

Three runs of one job file (the MLP example with --backends candidates, MaxThroughput), each a process of
its own running `aitune-ray tune`:

1. cold: from nothing, with a fresh, empty Inductor cache folder;
2. killed: from nothing, with another fresh cache folder; SIGKILLed as soon as the run folder holds the
   results of half of the candidates;
3. resumed: `--resume` on the killed run's folder, with the killed run's cache folder (one user's
   machine: what the killed run compiled is still on its disk, as it would be);
4. with --control, a second cold run, to show how often two cold runs agree on this machine.

Every candidate that screening keeps is confirmed side by side with eager before the choice (max_finalists
10), so the decision rests on paired numbers taken in one process at one time.

The targets: resumed wall + killed wall <= 1.1x cold wall; resumed wall <= 0.6x cold wall; the same
decision (chosen backend) for every module. Wall times are whole processes: start, Ray (when used),
recording, builds, re-measurement, checkpoint and its load-back check.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))   # results_table.py

from results_table import publish  # noqa: E402

BACKENDS = {
    "jit": {"type": "TorchInductorJitBackend"},
    "jit-max": {"type": "TorchInductorJitBackend", "config": {"mode": "max-autotune-no-cudagraphs"}},
    "aot": {"type": "TorchInductorAotBackend"},
    "onnx": {"type": "ONNXRuntimeBackend"},
    "ao-int8wo": {"type": "TorchAOBackend", "config": {"quantization": "int8wo"}},
    "ao-int8dq": {"type": "TorchAOBackend", "config": {"quantization": "int8dq"}},
}


def write_job(folder: Path, backends: list[str], executor: str, device: str, blocks: int, width: int) -> Path:
    job = {
        "model": "examples.mlp.model:make_model", "model_args": {"blocks": blocks, "width": width},
        "data": "examples.mlp.model:make_data", "data_args": {"batch_sizes": [4, 16], "per_batch_size": 4, "width": width},
        "modules": [{"path": "", "name": "mlp"}],
        # every candidate is a finalist: the choice is made in one confirm session (paired numbers)
        "strategy": {"type": "MaxThroughput", "max_finalists": 10,
                     "measure": {"warmup_runs": 3, "min_runs": 10, "max_runs": 100, "max_seconds": 0.5}},
        "backends": [BACKENDS[name] for name in backends],
        "device": device, "executor": {"type": executor},
    }
    path = folder / "job.yaml"
    path.write_text(json.dumps(job, indent=1))   # JSON is YAML
    return path


def start(job: Path, folder: Path, name: str, cache: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    args = [sys.executable, "-m", "aitune_ray", "tune", str(job), "--output", str(folder / f"{name}.ait"),
            "--report", str(folder / f"{name}.md"), *extra]
    log = open(folder / f"{name}.log", "w")
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, started: float, timeout_s: float) -> tuple[float, int]:
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    return time.perf_counter() - started, rc


def results_in(run_dir: Path) -> int:
    return sum(1 for _ in run_dir.glob("*/results/*.json"))


def decision(folder: Path, name: str) -> dict[str, str]:
    path = folder / f"{name}.json"
    if not path.is_file():
        return {}
    report = json.loads(path.read_text())["report"]
    out = {}
    for module in report["modules"]:
        chosen = next((r for r in module["results"] if r["key"] == module["chosen"]), None)
        out[module["module"]] = "eager" if chosen is None else f"{chosen['backend']} ({module['chosen']})"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="jit,jit-max,aot,onnx,ao-int8wo,ao-int8dq",
                        help=f"comma-separated, from {', '.join(BACKENDS)}")
    parser.add_argument("--executor", choices=["inline", "ray"], default="inline")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=1800.0, help="per run, in seconds")
    parser.add_argument("--control", action="store_true", help="a second cold run too: how often two cold runs "
                        "agree on this machine (the decision's own noise, apart from resuming)")
    parser.add_argument("--out", help="also write the table to this markdown file")
    parser.add_argument("--keep", help="keep the runs' folders here (default: a temporary folder, removed)")
    args = parser.parse_args()
    names = args.backends.split(",")
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        parser.error(f"unknown backends {unknown}")
    half = (len(names) + 1) // 2
    with tempfile.TemporaryDirectory(prefix="aitune-ray-resume-bench-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        job = write_job(folder, names, args.executor, args.device, args.blocks, args.width)

        started = time.perf_counter()
        cold_s, cold_rc = finish(start(job, folder, "cold", folder / "cache-cold", "--fresh"), started, args.timeout)
        if cold_rc != 0:
            print((folder / "cold.log").read_text()[-3000:])
            raise SystemExit(f"the cold run failed (exit {cold_rc}); no comparison made")

        run_dir = folder / "killed.run"
        started = time.perf_counter()
        proc = start(job, folder, "killed", folder / "cache-killed", "--fresh", "--run-dir", str(run_dir))
        while proc.poll() is None and results_in(run_dir) < half and time.perf_counter() - started < args.timeout:
            time.sleep(0.05)
        done_at_kill = results_in(run_dir)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        killed_s, killed_rc = finish(proc, started, args.timeout)

        started = time.perf_counter()
        resumed_s, resumed_rc = finish(start(job, folder, "resumed", folder / "cache-killed", "--resume",
                                             "--run-dir", str(run_dir)), started, args.timeout)
        cold, resumed = decision(folder, "cold"), decision(folder, "resumed")
        control, control_s = None, None
        if args.control:
            started = time.perf_counter()
            control_s, _ = finish(start(job, folder, "control", folder / "cache-control", "--fresh"), started,
                                  args.timeout)
            control = decision(folder, "control")

    # With a control run, the cold reference is the mean of the two cold runs, one before and one after the
    # killed and resumed runs: on a shared machine the load drifts.
    cold_ref = cold_s if control_s is None else (cold_s + control_s) / 2

    total = killed_s + resumed_s
    rows = [("cold run", f"{cold_s:.1f}", f"{cold_s / cold_ref:.2f}", f"exit {cold_rc}")]
    if control_s is not None:
        rows.append(("second cold run (control, last)", f"{control_s:.1f}", f"{control_s / cold_ref:.2f}",
                     "the reference is the mean of the two cold runs"))
    rows += [
        (f"killed run (SIGKILL at {done_at_kill}/{len(names)} results)", f"{killed_s:.1f}",
         f"{killed_s / cold_ref:.2f}", f"exit {killed_rc}"),
        ("resumed run", f"{resumed_s:.1f}", f"{resumed_s / cold_ref:.2f}",
         f"exit {resumed_rc}; target <= 0.60: {'met' if resumed_s <= 0.6 * cold_ref else 'MISSED'}"),
        ("killed + resumed", f"{total:.1f}", f"{total / cold_ref:.2f}",
         f"target <= 1.10: {'met' if total <= 1.1 * cold_ref else 'MISSED'}"),
    ]
    same = bool(cold) and cold == resumed
    lines = [f"Resume benchmark: {len(names)} candidates ({args.backends}), MLP {args.blocks}x{args.width}, "
             f"{args.executor} executor on {args.device}", "",
             "| run | wall s | x cold | note |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    lines += ["", f"decision, cold: {cold or 'none'}", f"decision, resumed: {resumed or 'none'}",
              f"same decision: {'yes' if same else 'NO'}"]
    if control is not None:
        lines.append(f"decision, a second cold run (control): {control or 'none'}"
                     f" ({'agrees' if control == cold else 'differs'} with the first)")
    data = {"candidates": len(names), "backends": args.backends, "executor": args.executor, "device": args.device,
            "cold_s": cold_ref, "killed_s": killed_s, "resumed_s": resumed_s, "control_s": control_s,
            "killed_at": done_at_kill, "same_decision": same, "decisions": {"cold": cold, "resumed": resumed,
                                                                            "control": control}}
    publish("\n".join(lines), args.out, data, benchmark="resume")
    return 0 if same and cold_rc == 0 and resumed_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
