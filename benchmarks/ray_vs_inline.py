"""The same MaxThroughput job inline and on Ray, side by side in one run; prints a table.

    python benchmarks/ray_vs_inline.py --model mlp --backends jit,jit-max,ao-int8wo,ao-int8dq --out ray.md

Reports: each candidate's time inline (build + check + profile), inline and Ray wall time, Ray's fixed
overhead (Ray start and actors), the ideal schedule on N GPUs (the larger of the longest candidate and the
inline total over N), Ray's ratio to both, and whether both chose the same backend. Each run gets fresh,
empty Inductor and Triton cache folders, so neither reuses the other's compiled kernels, while candidates
within a run may share them (in one process inline; through the node's disk on Ray), as they would for a user.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aitune_ray as ait  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from backends import BACKENDS, make_model  # noqa: E402


def run(executor_name: str, args, device, dtype) -> dict:
    # Set before Ray starts, so that its workers inherit them.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"triton-{executor_name}-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{executor_name}-")
    model, data = make_model(args.model, device, dtype)
    backends = [BACKENDS[name]() for name in args.backends.split(",")]
    strategy = ait.MaxThroughputStrategy(backends, measure_config=MeasureConfig(max_seconds=1.0))
    wrapped = ait.Module(model, args.model, strategy=strategy)
    started = time.perf_counter()
    if executor_name == "inline":
        executor, overhead = ait.InlineExecutor(), 0.0
    else:
        executor = ait.RayExecutor(max_actors=args.gpus)
        executor.open()
        import ray

        ray.get([slot.ready_ref for slot in executor.pool.alive()])  # actors up (and warmed up on GPUs)
        overhead = time.perf_counter() - started
    try:
        report = ait.tune(wrapped, data, device=device, executor=executor)
    finally:
        executor.close()
    wall = time.perf_counter() - started
    mod = report.modules[0]
    chosen = mod.chosen_result()
    return {"wall_s": wall, "overhead_s": overhead, "report": mod,
            "chosen": chosen.backend + ("(" + chosen.spec["config"].__repr__() + ")" if chosen else "") if chosen
            else "eager",
            "chosen_key": mod.chosen, "speedups": dict(mod.speedups),
            "candidates": {r.key: (r.backend, r.status, r.total_s, r.gpu) for r in mod.results}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp", choices=["mlp", "encoder"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backends", default="jit,jit-max,onnx,ao-int8wo")
    parser.add_argument("--gpus", type=int, default=max(1, torch.cuda.device_count()),
                        help="actors on Ray (one per GPU)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    ray_run = run("ray", args, device, dtype)
    inline = run("inline", args, device, dtype)

    per = inline["candidates"]
    total = sum(t for _, _, t, _ in per.values())
    longest = max(t for _, _, t, _ in per.values())
    ideal = max(longest, total / args.gpus)
    lines = [f"### Ray vs inline: {args.model} on {device} ({dtype}), {len(per)} candidates, {args.gpus} GPU(s)", "",
             "| candidate | status | inline s | share of inline total | Ray s | Ray GPU |", "|---|---|---|---|---|---|"]
    for key, (backend, status, secs, _) in per.items():
        r = ray_run["candidates"].get(key, ("", "-", float("nan"), ""))
        lines.append(f"| {backend} `{key[-12:]}` | {status} / {r[1]} | {secs:.1f} | {secs / total:.0%} | {r[2]:.1f} | {r[3]} |")
    same = inline["chosen_key"] == ray_run["chosen_key"]
    gap = ""
    if not same and inline["chosen_key"] and ray_run["chosen_key"]:
        a, b = inline["speedups"][inline["chosen_key"]], inline["speedups"].get(ray_run["chosen_key"], float("nan"))
        gap = f" (Ray's choice is {b / a:.1%} of the inline choice's speedup, measured inline)"
    lines += ["", "| measure | value |", "|---|---|",
              f"| inline wall | {inline['wall_s']:.1f} s |",
              f"| Ray wall (start and actors included) | {ray_run['wall_s']:.1f} s |",
              f"| Ray fixed overhead (Ray start + actors up and warmed) | {ray_run['overhead_s']:.1f} s |",
              f"| Ray / inline | {ray_run['wall_s'] / inline['wall_s']:.2f}x |",
              f"| longest candidate | {longest:.1f} s ({longest / total:.0%} of inline total {total:.1f} s) |",
              f"| ideal {args.gpus}-GPU schedule, max(longest, total/{args.gpus}) | {ideal:.1f} s |",
              f"| Ray / ideal | {ray_run['wall_s'] / ideal:.2f}x |",
              f"| chosen inline / Ray | {inline['chosen']} / {ray_run['chosen']} ({'same' if same else 'differ'}{gap}) |"]
    text = "\n".join(lines) + "\n\n" + inline["report"].markdown() + "\n" + ray_run["report"].markdown()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {k: {kk: vv for kk, vv in v.items() if kk != "report"} for k, v in
             (("inline", inline), ("ray", ray_run))}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
