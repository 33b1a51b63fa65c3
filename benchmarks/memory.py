"""Memory: the peak of one MaxThroughput job as the number of candidates grows, or (--cycles) what the driver
keeps from one tune + save + load cycle to the next; prints a table.

    python benchmarks/memory.py --device cpu --candidates 2,8 --buffer-mb 400 --out OUT/memory.md
    python benchmarks/memory.py --device cuda --candidates 2,8 --buffer-mb 2048 --out OUT/memory.md
    python benchmarks/memory.py --cycles 12 [--contain] --out OUT/driver.md

Peak with the number of candidates (the default):

Each candidate is a real backend (HoardingBackend) that keeps a buffer of --buffer-mb once built, as a
quantized copy of the weights, an ONNX Runtime session or a loaded AOT package would, and serves a
linear layer with a delay of its own: candidate i is (1 + 0.25 i) times slower than the fastest, so the
candidates differ by more than MaxThroughput's re-measure margin (10 %), as real candidates usually do.
Candidates with speeds within the margin of the best are finalists, all of which the side-by-side
re-measure must hold at once: memory then grows with the finalists, never with the other candidates.

Every configuration runs in a process of its own, inline (one process) and, with --ray, on a local Ray
with one actor. Reported: the peak resident memory of the process that built (the driver inline, the actor
on Ray), the peak device memory there (cuda), and the ratio of each peak to the smallest configuration's.
Target: 8 candidates at most 1.3x the peak with 2.

What the driver keeps (--cycles N): each cycle tunes the MLP example (1 block of 64, OneBackend over
TorchInductorJitBackend, no performance gate, inline; --contain builds in a child process each), saves the
checkpoint, loads it into a fresh model and calls it once; then everything is dropped and the garbage
collected. The table shows the driver's resident memory and the count of objects the garbage collector
tracks after each cycle; the last line, the growth per cycle from cycle 3 on (the first cycles pay one-time
imports and caches). RELIABILITY.md ("Driver memory") says why it grows.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # results_table.py

from aitune_ray.backend import Backend, BackendConfig  # noqa: E402
from results_table import publish  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def search_path() -> str:
    """PYTHONPATH for the child runs and the actors: this checkout first, then what this process was given."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


@dataclasses.dataclass
class HoardingConfig(BackendConfig):
    buffer_mb: int = 400
    delay_s: float = 0.0
    tag: int = 0


class HoardingBackend(Backend):
    """Correct (the module's own linear layer) and holding buffer_mb of memory on its device once built."""

    config_class = HoardingConfig

    def _build(self, module, samples, device, workdir):
        self._buffer = torch.ones(self.config.buffer_mb * 2**20 // 4, dtype=torch.float32, device=device)
        self._linear = module.linear

    def _infer(self, x):
        if self.config.delay_s:
            time.sleep(self.config.delay_s)
        return self._linear(x)


class Slow(nn.Module):
    def __init__(self, delay_s: float):
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.delay_s = nn.Linear(64, 64), delay_s

    def forward(self, x):
        time.sleep(self.delay_s)
        return self.linear(x)


def one(args) -> dict:
    """One configuration, in this process: tune, then report the peaks."""
    import aitune_ray as ait
    from aitune_ray.measure.timing import MeasureConfig

    from benchmarks.memory import HoardingBackend, HoardingConfig, Slow   # by import path (Ray workers too)

    device = torch.device(args.device)
    step = 0.25 * args.delay_ms / 1e3
    backends = [HoardingBackend(HoardingConfig(args.buffer_mb, delay_s=i * step, tag=i)) for i in range(args.count)]
    measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.5)
    strategy = ait.MaxThroughputStrategy(backends, measure_config=measure).enable_performance_validation(False)
    model = ait.Module(Slow(args.delay_ms / 1e3).to(device), "slow", strategy=strategy)
    data = [torch.randn(4, 64, device=device) for _ in range(2)]
    if args.run == "ray":
        import ray

        ray.init(include_dashboard=False, log_to_driver=False, num_cpus=2,
                 runtime_env={"env_vars": {"PYTHONPATH": search_path()}})
        executor = ait.RayExecutor(max_actors=1, remeasure_rounds=3)
    else:
        executor = ait.InlineExecutor(remeasure_rounds=3)
    if args.keep_all:   # the behaviour before builds were released: every build lives until the decision
        executor.release = lambda context, result: None
    started = time.perf_counter()
    with executor:
        ait.tune(model, data, device=str(device), executor=executor, call_as_given=True)
        stats = executor.actor_stats()[0] if args.run == "ray" else executor.worker.stats()
    chosen = model.report.chosen_result()
    if args.run != "ray":
        stats["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if device.type == "cuda":
            stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    return {"run": args.run, "candidates": args.count, "wall_s": time.perf_counter() - started,
            "peak_rss_mb": stats["peak_rss_bytes"] / 2**20, "peak_device_mb": stats["peak_memory_bytes"] / 2**20,
            "chosen": chosen.spec["config"]["tag"] if chosen else None}


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def driver_cycles(cycles: int, contain: bool) -> dict:
    """What the driver holds after each tune + save + load cycle (see the module docstring)."""
    import aitune_ray as ait
    from aitune_ray.backend import TorchInductorJitBackend
    from aitune_ray.measure.timing import MeasureConfig
    from examples.mlp.model import make_data, make_model

    data = make_data(batch_sizes=(4,), per_batch_size=2)
    measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aitune-ray-bench-") as folder:
        path = Path(folder) / "m.ait"
        for cycle in range(cycles):
            strategy = ait.OneBackendStrategy(TorchInductorJitBackend(), measure_config=measure)
            module = ait.Module(make_model(blocks=1), "mlp", strategy=strategy.enable_performance_validation(False))
            ait.tune(module, data, call_as_given=True,
                     executor=ait.InlineExecutor(remeasure_rounds=0, contain=contain))
            ait.save(module, path)
            fresh = ait.load(ait.Module(make_model(blocks=1), "mlp"), path)
            with torch.no_grad():
                fresh(data[0])
            del module, fresh
            gc.collect()
            rows.append({"cycle": cycle, "rss_mb": rss_mb(), "gc_objects": len(gc.get_objects())})
    result = {"contain": contain, "cycles": rows}
    if len(rows) > 4:
        first, last = rows[3], rows[-1]
        span = last["cycle"] - first["cycle"]
        result["per_cycle_mb"] = (last["rss_mb"] - first["rss_mb"]) / span
        result["per_cycle_objects"] = (last["gc_objects"] - first["gc_objects"]) / span
    return result


def driver_table(result: dict) -> str:
    lines = [f"builds {'in a child process' if result['contain'] else 'in the driver'}; torch {torch.__version__}",
             "", "| cycle | RSS (MB) | gc objects |", "|---|---|---|"]
    lines += [f"| {r['cycle']} | {r['rss_mb']:.1f} | {r['gc_objects']} |" for r in result["cycles"]]
    if "per_cycle_mb" in result:
        lines += ["", f"per cycle from cycle 3: {result['per_cycle_mb']:.2f} MB, "
                      f"{result['per_cycle_objects']:.0f} objects"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--candidates", default="2,8", help="comma-separated candidate counts")
    parser.add_argument("--buffer-mb", type=int, default=400)
    parser.add_argument("--delay-ms", type=float, default=4.0, help="eager's delay; candidate i adds i/4 of it")
    parser.add_argument("--ray", action="store_true", help="also run each count on a local Ray (one actor)")
    parser.add_argument("--keep-all", action="store_true", help="release no build before the decision (the old "
                        "behaviour, for comparison)")
    parser.add_argument("--cycles", type=int, help="instead: what the driver keeps over this many tune + save "
                        "+ load cycles (see the docstring)")
    parser.add_argument("--contain", action="store_true", help="with --cycles: build in a child process "
                        "(InlineExecutor(contain=True))")
    parser.add_argument("--out", help="write the table (Markdown) and a .json next to it")
    parser.add_argument("--one", help=argparse.SUPPRESS)   # internal: run one configuration, print JSON
    parser.add_argument("--run", default="inline", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args)))
        return 0
    if args.cycles:
        result = driver_cycles(args.cycles, args.contain)
        publish(driver_table(result), args.out, result, benchmark="driver_memory")
        return 0
    rows = []
    for run in ["inline"] + (["ray"] if args.ray else []):
        for count in [int(c) for c in args.candidates.split(",")]:
            cmd = [sys.executable, __file__, "--one", "1", "--run", run, "--count", str(count), "--device",
                   args.device, "--buffer-mb", str(args.buffer_mb), "--delay-ms", str(args.delay_ms)] + (
                   ["--keep-all"] if args.keep_all else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=search_path()))
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                rows.append({"run": run, "candidates": count, "error": (proc.stderr or proc.stdout)[-2000:]})
                continue
            rows.append(json.loads(line[len("RESULT "):]))
    lines = [f"Peak memory, {args.device}, a {args.buffer_mb} MB buffer per built candidate"
             + (", every build kept until the decision (--keep-all)" if args.keep_all else ""), "",
             "| run | candidates | peak RSS MB | x smallest | peak device MB | x smallest | wall s | chosen |",
             "|---|---|---|---|---|---|---|---|"]
    for run in sorted({r["run"] for r in rows}):
        mine = [r for r in rows if r["run"] == run and "error" not in r]
        base = min(mine, key=lambda r: r["candidates"]) if mine else None
        for r in [r for r in rows if r["run"] == run]:
            if "error" in r:
                last = next((ln for ln in reversed(r["error"].strip().splitlines()) if ln.strip()), "")
                lines.append(f"| {run} | {r['candidates']} | failed: {last.strip()[:300]} (the .json has more) |||||")
                continue
            dev = r["peak_device_mb"]
            lines.append(f"| {run} | {r['candidates']} | {r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / base['peak_rss_mb']:.2f} "
                         f"| {dev:.0f} | {dev / base['peak_device_mb']:.2f} | {r['wall_s']:.1f} | {r['chosen']} |"
                         if base["peak_device_mb"] else
                         f"| {run} | {r['candidates']} | {r['peak_rss_mb']:.0f} | {r['peak_rss_mb'] / base['peak_rss_mb']:.2f} "
                         f"| - | - | {r['wall_s']:.1f} | {r['chosen']} |")
    publish("\n".join(lines), args.out, rows, benchmark="memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
