"""Kernel time against call time for attention: where a faster kernel can show and where it cannot.

    python benchmarks/kernel_time.py                          # GPU: (2,8,256,64) and (8,16,1024,64) fp16
    python benchmarks/kernel_time.py --shapes 4,32,4096,128,causal

Per shape and path, in us per call: the GPU time of the kernels one call launches (torch.profiler, summed
over the call's kernels), the time per call of 200 calls back to back (host and GPU overlap: the larger
of the two costs decides it), and one synchronized call. Paths: F.scaled_dot_product_attention with the
default choice; each SDPA backend's own aten op; the attention module compiled by torch.compile (Inductor,
then Inductor with CUDA graphs) and the same through TorchInductorJitBackend, as the tuner times
candidates. A kernel that is faster on the GPU can only make a call faster when the call is not bound
by the host, which these columns show side by side. The profiler runs last (CUPTI released after it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

os.environ.setdefault("TEARDOWN_CUPTI", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aitune_ray.backend import TorchInductorJitBackend, TorchInductorJitBackendConfig  # noqa: E402
from aitune_ray.samples import Sample, SampleStore  # noqa: E402
from forge_overhead import back_to_back_us  # noqa: E402
from kernel_forge import Attention, parse_shape  # noqa: E402


def one_call_us(fn, device: torch.device, calls: int = 100) -> float:
    times = []
    with torch.no_grad():
        for _ in range(calls):
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - started) * 1e6)
    return sorted(times)[len(times) // 2]


def kernel_us(fn, calls: int = 50) -> tuple[float, str]:
    """GPU time of the kernels per call, and the names of the longest ones."""
    from torch.autograd import DeviceType

    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    total = sum(e.self_device_time_total for e in kernels) / calls
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:3]
    names = "; ".join(f"{e.key[:48]} x{e.count / calls:g}" for e in top)
    return total, names


def paths_for(text: str, device: torch.device, dtype: torch.dtype) -> dict:
    shape, causal = parse_shape(text)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    aten = torch.ops.aten
    paths = {
        "F.sdpa (default choice)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "flash op": lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[0],
        "efficient op": lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, False, 0.0, causal)[0],
        "cuDNN op": lambda: aten._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, causal)[0],
    }
    module = Attention(causal).eval().to(device)
    paths["module"] = lambda: module(q, k, v)
    compiled = torch.compile(Attention(causal).eval().to(device))
    paths["torch.compile"] = lambda: compiled(q, k, v)
    graphed = torch.compile(Attention(causal).eval().to(device), mode="reduce-overhead")

    def graphed_call():
        torch.compiler.cudagraph_mark_step_begin()
        return graphed(q, k, v)

    paths["torch.compile reduce-overhead"] = graphed_call
    store = SampleStore([Sample((q, k, v), {}, module(q, k, v).detach(), shape[0])])
    for name, mode in (("TorchInductorJitBackend", None),
                       ("TorchInductorJitBackend reduce-overhead", "reduce-overhead")):
        backend = TorchInductorJitBackend(TorchInductorJitBackendConfig(mode=mode))
        backend.build(Attention(causal).eval().to(device), store, device, Path(tempfile.mkdtemp()))
        paths[name] = (lambda b: lambda: b.infer(q, k, v))(backend)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="2,8,256,64;8,16,1024,64", help="B,H,S,D[,causal] separated by ;")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not torch.cuda.is_available():
        print("kernel_time.py needs a CUDA GPU")
        return 1
    device, dtype = torch.device("cuda"), torch.float16
    import torch._dynamo.utils as dynamo_utils

    for text in args.shapes.split(";"):
        paths = paths_for(text, device, dtype)
        rows = {}
        for name, fn in paths.items():
            try:
                for _ in range(5):
                    fn()
                rows[name] = [back_to_back_us(fn, device), one_call_us(fn, device)]
            except Exception as exc:  # noqa: BLE001 - a backend the GPU lacks: say so, go on
                rows[name] = [f"{type(exc).__name__}: {str(exc)[:80]}"]
        for name, fn in paths.items():
            if len(rows[name]) == 2:
                rows[name].extend(kernel_us(fn))
        print(f"\n### {text} {dtype}, {torch.cuda.get_device_name()}\n")
        print("| path | kernel GPU us per call | back to back us per call | one call us | longest kernels |")
        print("|---|---|---|---|---|")
        for name, row in rows.items():
            if len(row) == 1:
                print(f"| {name} | {row[0]} | | | |")
            else:
                print(f"| {name} | {row[2]:.1f} | {row[0]:.1f} | {row[1]:.1f} | {row[3]} |")
        counters = {k: dict(v) for k, v in dynamo_utils.counters.items() if k in ("stats", "graph_break", "recompiles")}
        print(f"\nDynamo counters so far: {counters}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
