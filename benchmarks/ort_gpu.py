"""ONNX Runtime against eager and Inductor, timed as a user times a model: N calls back to back, one
synchronize, wall clock.

    python benchmarks/ort_gpu.py --out OUT                       # GPU: BERT-base and a ViT-B encoder, fp16
    python benchmarks/ort_gpu.py --size tiny --variants eager,ort --out OUT    # the same on a CPU, small

Variants: eager; inductor (torch.compile default); inductor-ro (reduce-overhead: CUDA graphs); ort
(ONNXRuntimeBackend, CUDA EP, IO binding); ort-graphs (the same with use_cuda_graphs); ort-opt and
ort-opt-graphs (with ONNX Runtime's transformer optimizer, model type bert or vit: fused attention,
LayerNorm, GELU). The ONNX model is exported once per model, and once more for the optimizer's variants;
each ORT variant opens its own session.

Per model and batch size, each round times every variant once in a shuffled order: a burst of calls back
to back, then one synchronize. The table gives the median over rounds of ms per call, the median of the
per-round speedups over eager, the host time per call (until the burst's calls have returned, before the
synchronize: close to the wall time means the loop is host-bound), on a GPU the kernel time per call from
torch's profiler (OUT/profile_MODEL_bsN_VARIANT.md lists the top kernels) and the relative L2 error
against eager. Results go to OUT/ort_gpu.md and OUT/ort_gpu.json, rewritten after each model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # results_table.py

from aitune_ray.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig  # noqa: E402
from aitune_ray.measure.correctness import compare_outputs  # noqa: E402
from aitune_ray.model.samples import Sample, SampleStore, batch_size_of  # noqa: E402
from examples.bert.model import make_data as bert_data  # noqa: E402
from examples.bert.model import make_model as bert_model  # noqa: E402
from results_table import record_of  # noqa: E402

VARIANTS = ["eager", "inductor", "inductor-ro", "ort", "ort-graphs", "ort-opt", "ort-opt-graphs"]
logger = logging.getLogger("ort_gpu")
HEADS = HIDDEN = 0   # --heads / --hidden
OPSET = None         # --opset


class EncoderLayer(nn.Module):
    """Pre-norm self-attention and MLP, as in ViT-B."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Encoder(nn.Module):
    """A ViT-B-sized encoder on patch tokens: (batch, tokens, width) -> (batch, tokens, width)."""

    def __init__(self, width: int = 768, depth: int = 12, heads: int = 12):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def make(name: str, size: str, device: torch.device, dtype: torch.dtype, batch_sizes: list[int]):
    """(model, transformer optimizer model type, {batch size: (args, kwargs)})."""
    torch.manual_seed(0)
    if name == "bert":
        model = bert_model(size, dtype=str(dtype).replace("torch.", ""))
        items = bert_data(size, batch_sizes=batch_sizes, per_batch_size=1)
        calls = {item["input_ids"].shape[0]: ((), {k: v.to(device) for k, v in item.items()}) for item in items}
        return model.to(device), "bert", calls
    width, depth, heads, tokens = (768, 12, 12, 197) if size == "base" else (64, 2, 2, 17)
    model = Encoder(width, depth, heads).eval().to(device, dtype)
    calls = {bs: ((torch.randn(bs, tokens, width, device=device, dtype=dtype),), {}) for bs in batch_sizes}
    return model, "vit", calls


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def burst(fn, args, kwargs, calls: int, device: torch.device) -> tuple[float, float]:
    """(wall ms per call, host ms per call) over calls back-to-back calls and one synchronize."""
    sync(device)
    started = time.perf_counter()
    for _ in range(calls):
        fn(*args, **kwargs)
    issued = time.perf_counter()
    sync(device)
    done = time.perf_counter()
    return (done - started) / calls * 1e3, (issued - started) / calls * 1e3


def profile(fn, args, kwargs, calls: int, device: torch.device) -> tuple[float, str]:
    """(GPU kernel ms per call, the top kernels by GPU time) over one burst, with torch's profiler (CUPTI
    sees ONNX Runtime's kernels too). Kernel time close to the wall time per call: GPU-bound; far below it:
    host-bound."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    sync(device)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args, **kwargs)
        sync(device)
    events = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    total_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in events)
    events.sort(key=lambda e: -(getattr(e, "self_device_time_total", 0) or 0))
    lines = [f"{calls} calls, {total_us / calls / 1e3:.3f} GPU ms per call", "",
             "| kernel | calls | GPU us per model call | share |", "|---|---|---|---|"]
    for e in events[:15]:
        us = getattr(e, "self_device_time_total", 0) or 0
        lines.append(f"| {e.key[:90]} | {e.count // calls} | {us / calls:.1f} | {us / max(total_us, 1):.0%} |")
    return total_us / calls / 1e3, "\n".join(lines)


def build_variants(wanted: list[str], model, opt_type: str | None, calls: dict, device, workdir: Path,
                   use_dynamo: bool = True):
    """({variant: callable}, {variant: error}, {variant: build seconds}); a failed build is reported, not fatal."""
    built, errors, seconds = {}, {}, {}
    samples = SampleStore([Sample(a, k, model(*a, **k), batch_size_of(a, k)) for a, k in calls.values()])

    def add(name, make_fn):
        if name not in wanted:
            return
        started = time.perf_counter()
        try:
            built[name] = make_fn()
            seconds[name] = time.perf_counter() - started
            logger.info("%s built in %.1f s", name, seconds[name])
        except Exception as exc:  # a benchmark reports a failed variant and goes on
            errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
            logger.warning("%s failed: %s", name, errors[name])

    def compiled(mode):
        fn = torch.compile(model, mode=mode)
        for a, k in calls.values():     # compile (and capture) every batch size before timing
            for _ in range(3):
                if mode == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()
                fn(*a, **k)
        if mode != "reduce-overhead":
            return fn

        def step(*a, **k):
            torch.compiler.cudagraph_mark_step_begin()
            return fn(*a, **k)
        return step

    add("eager", lambda: model)
    if device.type == "cuda" or "inductor" in wanted:
        add("inductor", lambda: compiled(None))
    if device.type == "cuda":
        add("inductor-ro", lambda: compiled("reduce-overhead"))
    base = {}

    def ort(optimize: bool, graphs: bool):
        key = "opt" if optimize else "plain"
        if key not in base:
            config = ONNXRuntimeBackendConfig(use_dynamo=use_dynamo, transformer_optimizer=opt_type if optimize else None,
                                              transformer_heads=HEADS if optimize else 0,
                                              transformer_hidden=HIDDEN if optimize else 0, opset_version=OPSET)
            base[key] = ONNXRuntimeBackend(config).build(model, samples, device, workdir / key)
        if not graphs:
            return base[key]
        config = dataclasses.replace(base[key].config, use_cuda_graphs=True)
        state, artifacts = base[key].export()
        backend = ONNXRuntimeBackend(config).restore(model, state, artifacts, device, workdir / f"{key}-graphs")
        backend.activate()
        for a, k in calls.values():      # warm-up, capture, replay
            for _ in range(3):
                backend(*a, **k)
        return backend

    add("ort", lambda: ort(False, False))
    if device.type == "cuda":
        add("ort-graphs", lambda: ort(False, True))
    if opt_type:
        add("ort-opt", lambda: ort(True, False))
        if device.type == "cuda":
            add("ort-opt-graphs", lambda: ort(True, True))
    return built, errors, seconds


def measure(variants: dict, calls: dict, device, rounds: int, burst_ms: float, profile_dir: Path | None = None,
            model_name: str = "") -> list[dict]:
    rows = []
    for bs, (a, k) in sorted(calls.items()):
        with torch.no_grad():
            ref = variants["eager"](*a, **k) if "eager" in variants else None
            errors = {n: (compare_outputs([(fn(*a, **k), ref)]).max_error if ref is not None else None)
                      for n, fn in variants.items()}
            single = burst(variants.get("eager") or next(iter(variants.values())), a, k, 3, device)[0]
            n_calls = max(5, min(200, int(burst_ms / max(single, 1e-3))))
            times: dict[str, list[tuple[float, float]]] = {n: [] for n in variants}
            order = list(variants)
            for _ in range(rounds):
                random.shuffle(order)
                for name in order:
                    times[name].append(burst(variants[name], a, k, n_calls, device))
            gpu_ms = {}
            if profile_dir is not None and device.type == "cuda":
                for name, fn in variants.items():
                    try:
                        gpu_ms[name], text = profile(fn, a, k, min(n_calls, 20), device)
                        (profile_dir / f"profile_{model_name}_bs{bs}_{name}.md").write_text(text + "\n")
                    except Exception as exc:  # the profile is extra information, never the measurement
                        logger.warning("profile of %s failed: %s", name, exc)
        for name, runs in times.items():
            speedups = [e[0] / r[0] for e, r in zip(times["eager"], runs)] if "eager" in times else [float("nan")]
            rows.append({"batch_size": bs, "variant": name, "calls_per_burst": n_calls, "rounds": rounds,
                         "ms_per_call": statistics.median(r[0] for r in runs),
                         "host_ms_per_call": statistics.median(r[1] for r in runs),
                         "speedup_vs_eager": statistics.median(speedups),
                         "speedup_min": min(speedups), "speedup_max": max(speedups),
                         "rel_l2_error": errors[name], "gpu_ms_per_call": gpu_ms.get(name)})
    return rows


def table(results: dict) -> str:
    lines = []
    for model, entry in results["models"].items():
        lines += [f"### {model} ({entry['dtype']}, {entry['device']})", "",
                  "| batch | variant | ms/call | host ms/call | GPU ms/call | speedup vs eager (min-max) | rel. L2 error |",
                  "|---|---|---|---|---|---|---|"]
        for r in entry["rows"]:
            err = "" if r["rel_l2_error"] is None else f"{r['rel_l2_error']:.1e}"
            gpu = "" if r.get("gpu_ms_per_call") is None else f"{r['gpu_ms_per_call']:.3f}"
            lines.append(f"| {r['batch_size']} | {r['variant']} | {r['ms_per_call']:.3f} | {r['host_ms_per_call']:.3f} | "
                         f"{gpu} | {r['speedup_vs_eager']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f}) | {err} |")
        for name, error in entry["errors"].items():
            lines.append(f"\n{name} failed to build: {error}")
        lines += ["", "Build seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in entry["build_s"].items()), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="vit,bert")
    parser.add_argument("--size", default="base", choices=["base", "tiny"])
    parser.add_argument("--dtype", default=None, help="default: float16 on a GPU, float32 on a CPU")
    parser.add_argument("--batch-sizes", default="8,32")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--exporter", default="dynamo", choices=["dynamo", "torchscript"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--burst-ms", type=float, default=60.0, help="about how long one burst runs")
    parser.add_argument("--no-profile", action="store_true", help="skip the per-variant GPU kernel profiles")
    parser.add_argument("--heads", type=int, default=0, help="attention heads, for the transformer optimizer's "
                        "attention fusion (0: it detects them)")
    parser.add_argument("--hidden", type=int, default=0, help="hidden size, likewise")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset of the export (23 has an Attention op, "
                        "which the dynamo exporter uses for scaled_dot_product_attention); default: the exporter's")
    parser.add_argument("--out", default="ort-gpu-results")
    args = parser.parse_args()
    global HEADS, HIDDEN, OPSET
    HEADS, HIDDEN, OPSET = args.heads, args.hidden, args.opset
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("torch", "onnxscript", "onnx_ir", "onnxruntime", "fusion_base", "onnx_model", "onnx_model_bert"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else torch.float32)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [v for v in args.variants.split(",") if v]
    results = {"device": str(device), "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "",
               "torch": torch.__version__, "command": " ".join(sys.argv), "models": {}}
    try:
        import onnxruntime
        results["onnxruntime"] = f"{onnxruntime.__version__} {onnxruntime.get_available_providers()}"
    except ImportError:
        results["onnxruntime"] = "missing"
    random.seed(0)
    for name in [m for m in args.models.split(",") if m]:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
        model, opt_type, calls = make(name, args.size, device, dtype, batch_sizes)
        with torch.no_grad(), tempfile.TemporaryDirectory() as workdir:
            variants, errors, build_s = build_variants(wanted, model, opt_type, calls, device, Path(workdir),
                                                       use_dynamo=args.exporter == "dynamo")
            rows = measure(variants, calls, device, args.rounds, args.burst_ms,
                           None if args.no_profile else out, name)
        results["models"][name] = {"dtype": str(dtype), "device": str(device), "rows": rows, "errors": errors,
                                   "build_s": build_s}
        text = table(results)
        (out / "ort_gpu.md").write_text(f"{results['gpu'] or device}, torch {results['torch']}, onnxruntime "
                                        f"{results['onnxruntime']}\n\n`{results['command']}`\n\n{text}")
        (out / "ort_gpu.json").write_text(json.dumps(record_of(results, "ort_gpu"), indent=1, default=str))
        print(table({"models": {name: results["models"][name]}}), flush=True)
        del variants, model
        torch.compiler.reset()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
