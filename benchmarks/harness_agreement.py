"""Where the tuner's numbers and a user's stopwatch part: one tuning, then every harness on the same objects.

    python benchmarks/harness_agreement.py --out OUT                    # ViT-B/16 sized, fp16, jit-ro
    python benchmarks/harness_agreement.py --out OUT --backends jit,jit-ro --model bert

Tunes the model once (MaxThroughput, inline, on one device), then times, in this process and side by
side, eager (a separate copy of the model, never wrapped), the deployed wrapped Module, and each built
backend's own infer():
- with the tuner's re-measure (aitune_ray.measure.timing.profile_side_by_side: paired rounds of bursts);
- with the user's loop of benchmarks/decisions.py (100 back-to-back calls, two synchronizes,
  perf_counter, 5 interleaved repeats).
It also reads back what the tuner reported (its re-measured ms per call and its post-deploy check), and
per batch size it profiles a few calls of the deployed Module and of each backend with torch's profiler:
CUDA graph launches against kernel launches, and GPU time per call. OUT/agreement.md has the tables.

--sweep adds a table of eager and the deployed Module under the tuner's paired rounds at several burst
lengths (--sweep-bursts, ms) and the user's loop at several call counts (--sweep-calls), and the user's
loop once with Python's garbage collector frozen, twice over in turn, with the GPU's SM clock and board
power over each phase (nvidia-smi, sampled every 50 ms): whether a speedup depends on the burst length
the tuner times, and why.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aitune_ray as ait  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig, profile_side_by_side  # noqa: E402
from aitune_ray.samples import Sample, SampleStore  # noqa: E402
from backends import BACKENDS  # noqa: E402
from decisions import KeepingExecutor, batch_of, call, make_model, user_times  # noqa: E402


def launches(fn, item, calls: int, device: torch.device) -> dict:
    """Graph launches, kernel launches and GPU ms, per call, over `calls` calls under torch's profiler."""
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(3):
            call(fn, item)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                call(fn, item)
            torch.cuda.synchronize()
    graphs = kernels = 0
    gpu_us = 0.0
    for event in prof.key_averages():
        if event.key in ("cudaGraphLaunch", "cuGraphLaunch"):
            graphs += event.count
        elif event.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
            kernels += event.count
    for event in prof.events():
        if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA:
            gpu_us += event.device_time if hasattr(event, "device_time") else event.cuda_time
    return {"graph_launches": graphs / calls, "kernel_launches": kernels / calls, "gpu_ms": gpu_us / 1e3 / calls}


class GpuClocks:
    """SM clock and board power sampled every 50 ms by nvidia-smi in the background (nothing when it is absent):
    what the GPU ran at while one phase of the benchmark timed its calls."""

    def __init__(self):
        import shutil
        import subprocess
        import threading

        self.samples: list[tuple[float, float, float]] = []   # (perf_counter, SM MHz, W)
        self._proc = None
        if shutil.which("nvidia-smi") and torch.cuda.is_available():
            self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                           "-i", str(torch.cuda.current_device()), "-lms", "50"],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                mhz, watts = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), mhz, watts))

    def window(self, start: float, end: float) -> tuple[float | None, float | None]:
        """Mean SM MHz and W of the samples taken between start and end (perf_counter)."""
        inside = [(m, w) for t, m, w in self.samples if start <= t <= end]
        if not inside:
            return None, None
        return sum(m for m, _ in inside) / len(inside), sum(w for _, w in inside) / len(inside)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)


def sweep(fns: dict, items: list, store, device: torch.device, args) -> list[dict]:
    """The same callables under the tuner's paired rounds at several burst lengths and the user's loop at
    several call counts (and once with Python's collector frozen), twice over in turn: does the speedup
    depend on how long a timed burst lasts, and does the GPU clock follow it?"""
    import gc

    clocks, rows = GpuClocks(), []
    phases = [("tuner", float(b)) for b in args.sweep_bursts.split(",")] + \
             [("user", int(c)) for c in args.sweep_calls.split(",")] + [("user, gc frozen", args.calls)]
    try:
        for rep in range(2):
            for kind, value in phases:
                frozen = kind.endswith("frozen")
                if frozen:
                    gc.collect()
                    gc.freeze()
                    gc.disable()
                start, collected = time.perf_counter(), [g["collections"] for g in gc.get_stats()]
                try:
                    if kind == "tuner":
                        ms = {n: {bs: t.median_ms for bs, t in per.items()} for n, per in profile_side_by_side(
                            fns, store, device, args.sweep_rounds, MeasureConfig(burst_ms=value)).items()}
                    else:
                        ms = user_times(fns, items, device, value, args.repeats)
                finally:
                    if frozen:
                        gc.enable()
                        gc.unfreeze()
                mhz, watts = clocks.window(start, time.perf_counter())
                rows.append({"rep": rep + 1, "harness": kind, "setting": value, "ms": ms, "sm_mhz": mhz, "watts": watts,
                             "seconds": time.perf_counter() - start, "objects": len(gc.get_objects()),
                             "collections": [g["collections"] - c for g, c in zip(gc.get_stats(), collected)]})
    finally:
        clocks.stop()
    return rows


def sweep_lines(rows: list[dict], sizes: list[int], args) -> list[str]:
    names = [n for n in rows[0]["ms"] if n != "eager"] if rows else []
    cols = ["#", "harness", "burst ms / calls"] + [f"eager bs{bs} ms" for bs in sizes] + \
        [f"{n} bs{bs} ms" for n in names for bs in sizes] + [f"{n} bs{bs} speedup" for n in names for bs in sizes] + \
        ["SM MHz", "board W", "s", "collections gen0/1/2", "tracked objects"]
    lines = ["", f"Burst length against call count ({args.sweep_rounds} paired rounds per tuner setting; the user "
             f"loop's {args.repeats} repeats per count), twice over in turn; SM clock and power: nvidia-smi every 50 ms",
             "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        ms = row["ms"]
        cells = [str(row["rep"]), row["harness"], f"{row['setting']:g}"]
        cells += [f"{ms['eager'][bs]:.3f}" for bs in sizes]
        cells += [f"{ms[n][bs]:.3f}" for n in names for bs in sizes]
        cells += [f"{ms['eager'][bs] / ms[n][bs]:.3f}x" for n in names for bs in sizes]
        cells += [f"{row['sm_mhz']:.0f}" if row["sm_mhz"] else "-", f"{row['watts']:.0f}" if row["watts"] else "-",
                  f"{row['seconds']:.1f}", "/".join(str(c) for c in row["collections"]), str(row["objects"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="vit", choices=["vit", "bert"])
    parser.add_argument("--backends", default="jit-ro")
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", default=None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sweep", action="store_true", help="also time eager and the deployed Module with the "
                        "tuner's rounds at several burst lengths and the user's loop at several call counts")
    parser.add_argument("--sweep-bursts", default="10,50,200", help="burst lengths (ms) of the tuner's rounds")
    parser.add_argument("--sweep-calls", default="20,100,400", help="calls per user loop")
    parser.add_argument("--sweep-rounds", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    size = args.size or ("base" if device.type == "cuda" else "tiny")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    model, items = make_model(args.model, device, size)
    eager = make_model(args.model, device, size)[0]
    names = [b for b in args.backends.split(",") if b]
    candidates = [BACKENDS[b]() for b in names]
    labels = {c.key(): n for c, n in zip(candidates, names)}
    strategy = ait.MaxThroughputStrategy(candidates, measure_config=MeasureConfig(max_seconds=1.0))
    module = ait.Module(model, name=args.model, strategy=strategy)
    executor = KeepingExecutor(remeasure_rounds=args.rounds)
    started = time.perf_counter()
    func = (lambda **kw: module(**kw)) if isinstance(items[0], dict) else module
    report = ait.tune(func, items, device=device, executor=executor, call_as_given=True).modules[0]
    tune_s = time.perf_counter() - started

    fns = {"eager": eager, "deployed": module}
    if module.backend is not None:   # the chosen backend itself, without the Module around it
        fns[f"{labels.get(report.chosen, 'chosen')} (its infer)"] = module.backend.infer
    for key, backend in executor.kept.items():
        backend.activate()
        fns[labels.get(key, key)] = backend.infer
    store = SampleStore([Sample((), item, None, batch_of(item)) if isinstance(item, dict)
                         else Sample((item,), {}, None, batch_of(item)) for item in items])
    tuner_ms = {"eager": {bs: t["median_ms"] for bs, t in (report.remeasured_baseline or {}).items()}}
    for r in report.results:
        if r.remeasured:
            tuner_ms[labels.get(r.key, r.key)] = {bs: t["median_ms"] for bs, t in r.remeasured.items()}
    rows: dict[str, dict] = {}
    for rep in range(2):   # twice each, alternating: how far one harness moves between its own runs
        user = user_times(fns, items, device, args.calls, args.repeats)
        paired = profile_side_by_side(fns, store, device, args.rounds)
        rows[f"user loop #{rep + 1}"] = user
        rows[f"tuner's paired rounds #{rep + 1}"] = {n: {bs: t.median_ms for bs, t in per.items()}
                                                    for n, per in paired.items()}
    by_bs = {}
    for item in items:
        by_bs.setdefault(batch_of(item), item)

    sizes = sorted(by_bs)
    swept = sweep({"eager": fns["eager"], "deployed": fns["deployed"]}, items, store, device, args) if args.sweep else []
    # Profiled last: torch's profiler leaves CUPTI attached to this process, and every later kernel launch
    # costs more (eager's 128 launches per call, not a CUDA graph's one), so nothing is timed after it.
    profiles = {name: {bs: launches(fns[name], item, 20, device) for bs, item in sorted(by_bs.items())}
                for name in fns}
    lines = [f"# Harness agreement: {args.model} on {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}"
             f", torch {torch.__version__}", "",
             f"Command: python benchmarks/harness_agreement.py {' '.join(sys.argv[1:])}", "",
             f"Tuned in {tune_s:.0f} s. Decision: {report.decision}", "",
             "ms per call; speedup = eager over the candidate, within one harness run", ""]
    cols = ["harness", "callable"] + [f"bs{bs} ms" for bs in sizes] + [f"bs{bs} speedup" for bs in sizes]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    tables = {"as the tuner reported (re-measure)": tuner_ms, **rows}
    for harness, per in tables.items():
        base = per.get("eager", {})
        for name, ms in per.items():
            cells = [f"{ms.get(bs, float('nan')):.3f}" for bs in sizes]
            cells += [f"{base.get(bs, float('nan')) / ms[bs]:.3f}x" if ms.get(bs) else "-" for bs in sizes]
            lines.append(f"| {harness} | {name} | " + " | ".join(cells) + " |")
    for check in report.deploy_checks:
        lines += ["", f"Post-deploy check ({check.get('backend')}): {check.get('verdict')}, "
                      + ", ".join(f"bs{bs} {iv['median']:.3f}x [{iv['low']:.3f}, {iv['high']:.3f}]"
                                  for bs, iv in sorted((check.get("intervals") or {}).items()))]
    lines += ["", "Per call under torch's profiler (20 calls):", "",
              "| callable | bs | graph launches | kernel launches | GPU ms |", "|---|---|---|---|---|"]
    for name, per in profiles.items():
        for bs, p in per.items():
            if p:
                lines.append(f"| {name} | {bs} | {p['graph_launches']:.1f} | {p['kernel_launches']:.1f} | "
                             f"{p['gpu_ms']:.3f} |")
    if swept:
        lines += sweep_lines(swept, sizes, args)
    text = "\n".join(lines) + "\n"
    (out / "agreement.md").write_text(text)
    (out / "agreement.json").write_text(json.dumps({"tuner": tuner_ms, "harnesses": rows, "profiles": profiles,
                                                    "deploy_checks": report.deploy_checks, "sweep": swept}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
