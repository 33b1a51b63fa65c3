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
    report = ait.tune(func, items, device=device, executor=executor).modules[0]
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
    profiles = {name: {bs: launches(fns[name], item, 20, device) for bs, item in sorted(by_bs.items())}
                for name in fns}

    sizes = sorted(by_bs)
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
    text = "\n".join(lines) + "\n"
    (out / "agreement.md").write_text(text)
    (out / "agreement.json").write_text(json.dumps({"tuner": tuner_ms, "harnesses": rows, "profiles": profiles,
                                                    "deploy_checks": report.deploy_checks}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
