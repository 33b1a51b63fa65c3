"""Kernel selection on attention: per SDPA shape, every provider alone, then KernelSelectorBackend's choice.

    python benchmarks/kernel_forge.py --out kernel_forge.md            # GPU: the shapes of FACTS.md, fp16
    python benchmarks/kernel_forge.py --device cpu                     # CPU: small shapes, fp32
    python benchmarks/kernel_forge.py --executor ray --shapes 2,8,256,64 4,32,4096,128,causal

Per shape (an Attention module whose forward is one F.scaled_dot_product_attention call):
- default: PyTorch's own SDPA choice, timed on the same path as the providers;
- each provider alone (PyTorch flash / cuDNN / efficient, SageAttention, FlashAttention-4): its time and
  relative L2 error against the default's output, or why it is unavailable or rejected;
- the module tuned with KernelSelectorBackend around each --delegate (MaxThroughput picks among them;
  OneBackendStrategy for one): the provider it chose and the delegate it runs in, the tuned module's
  speedup over the eager module (the two timed in turn), whether the choice is within 3% of the best
  measured alone (the default counts: keeping it is a choice), and whether SageAttention was wrongly
  chosen (slower than the best by over 3%, or out of tolerance).

Times on a GPU are per call in back-to-back bursts of at least 1 ms (aitune_ray.measure.timing): at
tens of microseconds, a single call's latency is mostly launch and synchronization noise.

--executor ray makes the plan with the providers benchmarked on Ray's GPU actors (one per GPU).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # results_table.py

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import (KernelSelectorBackend, KernelSelectorBackendConfig, TorchEagerBackend,  # noqa: E402
                                TorchInductorJitBackend, TorchInductorJitBackendConfig)
from aitune_ray.kernel_forge import (FlashAttention4KernelProvider, FunctionSample,  # noqa: E402
                                     SageAttentionKernelProvider, TorchSDPAKernelProvider, benchmark_original,
                                     benchmark_provider)
from aitune_ray.records.imports import short_name  # noqa: E402
from aitune_ray.measure.request import TimingRequest  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from results_table import publish  # noqa: E402

SDPA = "scaled_dot_product_attention"
GPU_SHAPES = ["2,8,256,64", "8,16,1024,64", "4,32,4096,128", "1,24,16384,128", "4,32,4096,128,causal"]
CPU_SHAPES = ["1,2,64,16", "2,4,128,32", "2,4,128,32,causal"]
MEASURE = MeasureConfig(warmup_runs=5, min_runs=20, max_runs=200, max_cv=0.02, max_seconds=0.5)
WITHIN = 0.03
ROUNDS = 50          # eager and tuned module timed in turn


class Attention(nn.Module):
    def __init__(self, causal: bool = False):
        super().__init__()
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


DELEGATES = {
    "eager": TorchEagerBackend,
    "jit": TorchInductorJitBackend,
    "jit-ro": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="reduce-overhead")),
}


def providers() -> dict:
    return {"flash": TorchSDPAKernelProvider(SDPBackend.FLASH_ATTENTION),
            "cuDNN": TorchSDPAKernelProvider(SDPBackend.CUDNN_ATTENTION),
            "efficient": TorchSDPAKernelProvider(SDPBackend.EFFICIENT_ATTENTION),
            "SageAttention": SageAttentionKernelProvider(),
            "FlashAttention-4": FlashAttention4KernelProvider()}


def parse_shape(text: str) -> tuple[tuple[int, ...], bool]:
    parts = text.split(",")
    causal = parts[-1] == "causal"
    dims = tuple(int(p) for p in (parts[:-1] if causal else parts))
    if len(dims) != 4:
        raise SystemExit(f"a shape is B,H,S,D[,causal], not {text!r}")
    return dims, causal


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_shape(text: str, device: torch.device, dtype: torch.dtype, executor, delegate: str) -> dict:
    shape, causal = parse_shape(text)
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen).to(device, dtype) for _ in range(3))
    data = [(1, FunctionSample((q, k, v), {"is_causal": causal}))]
    row: dict = {"shape": text, "providers": {}}

    default = benchmark_original(SDPA, data, measure_config=MEASURE)
    row["default_ms"] = default.median_ms
    for name, provider in providers().items():
        record = benchmark_provider(SDPA, provider.to_dict(), data, measure_config=MEASURE)
        row["providers"][name] = {"status": record.status, "ms": record.median_ms, "error": record.max_error,
                                  "tolerance": record.tolerance, "why": record.error, "description": record.description}
        _sync(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    config = KernelSelectorBackendConfig(kernel_providers=list(providers().values()), measure=MEASURE.to_dict())
    candidates = [KernelSelectorBackend(config, DELEGATES[name]()) for name in delegate.split(",")]
    strategy = (ait.OneBackendStrategy(candidates[0], measure_config=MEASURE) if len(candidates) == 1 else
                ait.MaxThroughputStrategy(candidates, measure_config=MEASURE))
    wrapped = ait.Module(Attention(causal).eval().to(device), f"attention_{text.replace(',', '_')}", strategy=strategy)
    started = time.perf_counter()
    report = ait.tune(wrapped, [(q, k, v)], device=device, executor=executor, call_as_given=True)
    row["tune_s"] = time.perf_counter() - started
    failure = report.failures.get(wrapped.name)
    row["decision"] = f"tuning failed: {failure}" if failure else wrapped.report.decision
    row["kept_eager"] = wrapped.backend is None
    results = wrapped.report.results if wrapped.report else []
    result = next((r for r in results if r.key == wrapped.report.chosen), results[0] if results else None)
    spec = (result.spec.get("delegate") or {}) if result is not None else {}
    mode = (spec.get("config") or {}).get("mode")
    row["delegate"] = short_name(spec.get("type", "")) + (f" ({mode})" if mode else "")
    plan = (result.state.get("kernel_plan") or {}) if result is not None else {}
    chosen = next((r for r in plan.get("results", []) if r.get("selected")), None)
    row["chosen"] = chosen["description"] if chosen else "original (no replacement)"
    row["plan_gpus"] = sorted({r.get("gpu", "") for r in plan.get("results", [])} - {""})
    # Every KernelSelector candidate's own plan records (each profiled and chose on its own), for the JSON.
    keep = ("description", "status", "median_ms", "speedup", "selected", "max_error", "error")
    row["candidate_plans"] = [{"delegate": (r.spec.get("delegate") or {}).get("config"), "status": r.status,
                               "records": [{k: p.get(k) for k in keep}
                                           for p in (r.state.get("kernel_plan") or {}).get("results", [])]}
                              for r in results if r.state]
    eager = Attention(causal).eval().to(device)
    group = {"eager": lambda: eager(q, k, v), "tuned": lambda: wrapped(q, k, v)}
    timings = TimingRequest.paired("kernel-confirm", device, rounds=ROUNDS).run_groups({shape[0]: group}, device).timings
    row["eager_module_ms"], row["tuned_ms"] = timings["eager"][shape[0]].median_ms, timings["tuned"][shape[0]].median_ms
    row["speedup"] = row["eager_module_ms"] / row["tuned_ms"]
    judge(row)
    return row


def judge(row: dict) -> None:
    """Within 3% of the best measured alone, and whether SageAttention was chosen where it should not be."""
    alone = {"original (no replacement)": row["default_ms"]} if row["default_ms"] is not None else {}
    names = {}
    for name, p in row["providers"].items():
        names[p["description"]] = name
        if p["status"] == "ok" and p["ms"] is not None:
            alone[p["description"]] = p["ms"]
    best = min(alone, key=alone.get) if alone else None
    row["best_alone"] = names.get(best, best)
    chosen_ms = alone.get(row["chosen"])
    row["within"] = chosen_ms is not None and chosen_ms <= alone[best] * (1 + WITHIN)
    sage = row["providers"]["SageAttention"]
    row["sage_wrong"] = ""
    if row["chosen"] == sage["description"]:
        if sage["status"] != "ok":
            row["sage_wrong"] = f"YES ({sage['status']})"
        elif sage["ms"] > alone[best] * (1 + WITHIN):
            row["sage_wrong"] = "YES (slower)"
    row["chosen_short"] = names.get(row["chosen"], row["chosen"])
    if row["kept_eager"] and row["chosen"] != "original (no replacement)":
        row["chosen_short"] += " (the module kept eager)"
    elif not row["kept_eager"] and row.get("delegate"):
        row["chosen_short"] += f" in {row['delegate']}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def provider_cell(p: dict) -> str:
    if p["status"] == "ok":
        return f"{_ms(p['ms'])} ({p['error']:.1e})"
    if p["status"] == "rejected":
        error = f"{p['error']:.1e} > {p['tolerance']:.0e}" if p["error"] is not None else p["why"][:40]
        return f"rejected: {error}"
    return "unavailable" if p["status"] == "unsupported" else p["status"]


def table(rows: list[dict], header: str) -> str:
    names = list(providers())
    lines = [header, "",
             "| shape (B,H,S,D) | default ms | " + " | ".join(f"{n} ms (rel. err)" for n in names)
             + " | chosen | tuned speedup vs eager | within 3% of best alone | SageAttention wrongly chosen |",
             "|---" * (len(names) + 6) + "|"]
    notes = []
    for row in rows:
        cells = [provider_cell(row["providers"][n]) for n in names]
        within = "yes" if row["within"] else f"no (best: {row['best_alone']})"
        lines.append(f"| {row['shape']} | {_ms(row['default_ms'])} | " + " | ".join(cells)
                     + f" | {row['chosen_short']} | {row['speedup']:.2f}x | {within} | {row['sage_wrong'] or 'no'} |")
        for n in names:
            p = row["providers"][n]
            if p["status"] != "ok":
                notes.append(f"- {row['shape']} {n}: {p['status']}: {p['why']}")
        notes.append(f"- {row['shape']}: {row['decision']} (tuning {row['tune_s']:.1f} s; plan numbers from "
                     f"{', '.join(row['plan_gpus']) or '-'})")
    return "\n".join(lines) + "\n\nNotes:\n" + "\n".join(notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="float16 or bfloat16 on GPU (default float16); CPU: float32")
    parser.add_argument("--shapes", nargs="*", default=None, help="B,H,S,D[,causal] each (default: by device)")
    parser.add_argument("--executor", default="inline", choices=["inline", "ray"])
    parser.add_argument("--delegate", default=None,
                        help=f"comma list of {sorted(DELEGATES)}: the backends KernelSelectorBackend builds around "
                        "the plan; with several, MaxThroughput picks among them (jit-ro: Inductor with CUDA graphs). "
                        "Default: eager,jit,jit-ro on a GPU, eager on the CPU")
    parser.add_argument("--out", default=None, help="write the markdown table (and a .json beside it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else torch.float32)
    shapes = args.shapes or (GPU_SHAPES if device.type == "cuda" else CPU_SHAPES)
    args.delegate = args.delegate or ("eager,jit,jit-ro" if device.type == "cuda" else "eager")
    where = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    rows = []
    with (ait.InlineExecutor() if args.executor == "inline" else ait.RayExecutor()) as executor:
        for text in shapes:
            print(f"shape {text} ...", flush=True)
            rows.append(run_shape(text, device, dtype, executor, args.delegate))
    header = (f"### Kernel selection on SDPA: {where}, {str(dtype).replace('torch.', '')}, torch {torch.__version__}, "
              f"{args.executor} executor, {args.delegate} delegate")
    publish(table(rows, header), args.out, rows, benchmark="kernel_forge")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
