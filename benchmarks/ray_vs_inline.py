"""The same MaxThroughput job inline and on Ray, side by side in one run; prints a table.

    python benchmarks/ray_vs_inline.py --model mlp --backends jit,jit-max,ao-int8wo,ao-int8dq --out ray.md
    python benchmarks/ray_vs_inline.py --model pipeline --backends jit,onnx --out pipeline.md

Models as in backends.py (mlp, encoder, bert, pipeline). For the pipeline, both modules are tuned in one
tune() call, one module after the other, and the wall times cover both; the table lists each module's
candidates.

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
from backends import BACKENDS, MODELS, make_model, wrap_model  # noqa: E402


def run(executor_name: str, args, device, dtype) -> dict:
    # Set before Ray starts, so that its workers inherit them.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"triton-{executor_name}-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{executor_name}-")
    model, data = make_model(args.model, device, dtype)
    names = args.backends.split(",")
    root, _ = wrap_model(args.model, model, lambda: ait.MaxThroughputStrategy(
        [BACKENDS[name]() for name in names], measure_config=MeasureConfig(max_seconds=1.0)))
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
        report = ait.tune(root, data, device=device, executor=executor)  # every module, one after another
    finally:
        executor.close()
    wall = time.perf_counter() - started
    several = len(report.modules) > 1
    candidates, modules, chosen, chosen_key, speedups = {}, {}, {}, {}, {}
    for mod in report.modules:
        ids = []
        for r in mod.results:  # in the job's order inline; in finishing order on Ray
            ident = f"{mod.module}/{r.key}" if several else r.key
            candidates[ident] = (r.backend, r.status, r.total_s, r.gpu)
            ids.append(ident)
        modules[mod.module] = ids
        result = mod.chosen_result()
        chosen[mod.module] = (result.backend + "(" + repr(result.spec["config"]) + ")") if result else "eager"
        chosen_key[mod.module] = mod.chosen
        speedups[mod.module] = dict(mod.speedups)
    return {"wall_s": wall, "overhead_s": overhead, "reports": report.modules, "chosen": chosen,
            "chosen_key": chosen_key, "speedups": speedups, "candidates": candidates, "modules": modules,
            "candidate_total_s": sum(t for _, _, t, _ in candidates.values())}


def ideal_schedule(inline: dict, gpus: int) -> tuple[float, float]:
    """(ideal wall on gpus GPUs, longest candidate): modules are tuned one after another, so per module the
    larger of its longest candidate and its total over the GPUs, summed over modules."""
    ideal = longest = 0.0
    for ids in inline["modules"].values():
        times = [inline["candidates"][i][2] for i in ids] or [0.0]
        ideal += max(max(times), sum(times) / gpus)
        longest += max(times)
    return ideal, longest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp", choices=MODELS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backends", default="jit,jit-max,onnx,ao-int8wo")
    parser.add_argument("--gpus", type=int, default=max(1, torch.cuda.device_count()),
                        help="actors on Ray (one per GPU)")
    parser.add_argument("--out", default=None, help="markdown file; a .json beside it holds the numbers "
                        "(benchmarks/schedule_sim.py reads it)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    ray_run = run("ray", args, device, dtype)
    inline = run("inline", args, device, dtype)

    per = inline["candidates"]
    total = inline["candidate_total_s"]
    ideal, longest = ideal_schedule(inline, args.gpus)
    several = len(inline["modules"]) > 1
    lines = [f"### Ray vs inline: {args.model} on {device} ({dtype}), {len(per)} candidates"
             + (f" over {len(inline['modules'])} modules ({', '.join(inline['modules'])}), tuned one after another"
                if several else "") + f", {args.gpus} GPU(s)", "",
             "| module | candidate | status | inline s | share of inline total | Ray s | Ray GPU |",
             "|---|---|---|---|---|---|---|"]
    for module, ids in inline["modules"].items():
        for ident in ids:
            backend, status, secs, _ = per[ident]
            r = ray_run["candidates"].get(ident, ("", "-", float("nan"), ""))
            lines.append(f"| {module} | {backend} `{ident[-12:]}` | {status} / {r[1]} | {secs:.1f} | "
                         f"{secs / total:.0%} | {r[2]:.1f} | {r[3]} |")
    verdicts = []
    for module in inline["modules"]:
        a_key, b_key = inline["chosen_key"].get(module), ray_run["chosen_key"].get(module)
        text = f"{inline['chosen'][module]} / {ray_run['chosen'].get(module, '-')} ({'same' if a_key == b_key else 'differ'}"
        if a_key != b_key and a_key and b_key:
            a, b = inline["speedups"][module][a_key], inline["speedups"][module].get(b_key, float("nan"))
            text += f"; Ray's choice is {b / a:.1%} of the inline choice's speedup, measured inline"
        verdicts.append((f"{module}: " if several else "") + text + ")")
    longest_name = "sum of each module's longest candidate" if several else "longest candidate"
    lines += ["", "| measure | value |", "|---|---|",
              f"| inline wall | {inline['wall_s']:.1f} s (candidates {total:.1f} s, the rest "
              f"{inline['wall_s'] - total:.1f} s: recording, eager baseline, decision) |",
              f"| Ray wall (start and actors included) | {ray_run['wall_s']:.1f} s |",
              f"| Ray fixed overhead (Ray start + actors up and warmed) | {ray_run['overhead_s']:.1f} s |",
              f"| Ray / inline | {ray_run['wall_s'] / inline['wall_s']:.2f}x |",
              f"| {longest_name} | {longest:.1f} s ({longest / total:.0%} of inline candidate total {total:.1f} s) |",
              f"| ideal {args.gpus}-GPU schedule, max(longest, total/{args.gpus})"
              + (" per module, summed" if several else "") + f" | {ideal:.1f} s |",
              f"| Ray / ideal | {ray_run['wall_s'] / ideal:.2f}x |",
              f"| chosen inline / Ray | {'; '.join(verdicts)} |"]
    text = "\n".join(lines) + "\n\n" + "\n".join(m.markdown() for m in inline["reports"] + ray_run["reports"])
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        meta = {"model": args.model, "device": str(device), "dtype": str(dtype), "gpus": args.gpus,
                "backends": args.backends.split(",")}
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {**meta, **{k: {kk: vv for kk, vv in v.items() if kk != "reports"} for k, v in
                        (("inline", inline), ("ray", ray_run))}}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
