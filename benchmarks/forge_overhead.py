"""Host time of a kernel replacement: what each layer between a module call and the kernel costs.

    python benchmarks/forge_overhead.py                   # GPU: (2, 8, 256, 64) fp16
    python benchmarks/forge_overhead.py --shape 1,2,64,16 # CPU

A single call's latency includes the host time spent before the kernel is launched, so at short kernels
that time decides whether a faster kernel helps. Per path, in turn: the latency of one call (CUDA events
around it, as the tuner times candidates) and the time per call of 200 calls back to back (host and
kernel overlap). Paths: F.scaled_dot_product_attention as is, and inside sdpa_kernel(backend) (what a
provider cost per call before it called the backend's op directly); each SDPA backend's provider called
directly; the module with a one-provider plan applied; the KernelSelectorBackend built around it
(eager delegate). F.sdpa is also timed before those builds profile the module, which shows whether
profiling left a cost behind. Ends with the top of a cProfile of the KernelSelectorBackend's calls.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import pstats
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aitune_ray.backend import KernelSelectorBackend, KernelSelectorBackendConfig, TorchEagerBackend  # noqa: E402
from aitune_ray.kernel_forge import FunctionSample, KernelOptimizationPlan, TorchSDPAKernelProvider  # noqa: E402
from aitune_ray.measure.timing import measure_interleaved  # noqa: E402
from aitune_ray.samples import Sample, SampleStore  # noqa: E402
from kernel_forge import Attention  # noqa: E402


def back_to_back_us(fn, device, calls: int = 200, repeats: int = 5) -> float:
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", default=None, help="B,H,S,D (default: 2,8,256,64 on GPU, 1,2,64,16 on CPU)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    shape = tuple(int(x) for x in (args.shape or ("2,8,256,64" if gpu else "1,2,64,16")).split(","))
    dtype = torch.float16 if gpu else torch.float32
    q, k, v = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    names = ["flash", "cudnn", "efficient"] if gpu else ["flash"]
    pinned = TorchSDPAKernelProvider(names[-1]).backend
    paths = {"F.sdpa": lambda: F.scaled_dot_product_attention(q, k, v)}

    def under_sdpa_kernel():
        with sdpa_kernel(pinned):
            return F.scaled_dot_product_attention(q, k, v)

    paths[f"F.sdpa under sdpa_kernel({names[-1]})"] = under_sdpa_kernel
    module = Attention().eval()
    paths["module"] = lambda: module(q, k, v)
    for name in names:
        provider = TorchSDPAKernelProvider(name)
        if not provider.prepare([FunctionSample((q, k, v), {})]):
            print(f"{name}: unsupported: {provider.reason}")
            continue
        print(f"{name}: pin_op={provider.pin_op}")
        paths[f"{name} provider"] = (lambda p: lambda: p(q, k, v))(provider)
    provider = TorchSDPAKernelProvider(names[-1])
    provider.prepare([FunctionSample((q, k, v), {})])
    planned = KernelOptimizationPlan((provider,)).wrap(Attention().eval())
    paths[f"planned module ({names[-1]})"] = lambda: planned(q, k, v)
    # Before anything here profiles: the profiler could leave costs behind (CUPTI; see the kernel_forge profiler).
    before = measure_interleaved({"F.sdpa": paths["F.sdpa"]}, device, shape[0], rounds=200, burst_ms=0)["F.sdpa"]
    before_b2b = back_to_back_us(paths["F.sdpa"], device)
    config = KernelSelectorBackendConfig(kernel_providers=[TorchSDPAKernelProvider(names[-1])])
    backend = KernelSelectorBackend(config, TorchEagerBackend())
    store = SampleStore([Sample((q, k, v), {}, module(q, k, v).detach(), shape[0])])
    backend.build(Attention().eval(), store, device, Path(tempfile.mkdtemp()))
    backend.activate()
    print("plan:", backend.plan.describe())
    paths["KernelSelectorBackend.infer (its own plan)"] = lambda: backend.infer(q, k, v)
    forced = KernelSelectorBackend(config, TorchEagerBackend())
    forced.preset_plan = KernelOptimizationPlan((provider,))
    forced.build(Attention().eval(), store, device, Path(tempfile.mkdtemp()))
    forced.activate()
    paths[f"KernelSelectorBackend.infer ({names[-1]} plan)"] = lambda: forced.infer(q, k, v)
    latency = measure_interleaved(paths, device, shape[0], rounds=200, burst_ms=0)   # one call at a time
    rows = ["| path | one call, p50 us | back to back, us per call |", "|---|---|---|",
            f"| F.sdpa, before the KernelSelector builds profiled | {before.median_ms * 1e3:.1f} | {before_b2b:.1f} |"]
    for name, fn in paths.items():
        rows.append(f"| {name} | {latency[name].median_ms * 1e3:.1f} | {back_to_back_us(fn, device):.1f} |")
    where = torch.cuda.get_device_name() if gpu else "CPU"
    print(f"\n### Host overhead of kernel replacement, {shape} {dtype}, {where}\n")
    print("\n".join(rows))
    target = paths[f"KernelSelectorBackend.infer ({names[-1]} plan)"]
    profiler = cProfile.Profile()
    with torch.no_grad():
        profiler.enable()
        for _ in range(2000):
            target()
        profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    print("\ncProfile of 2000 calls of the last path:\n" + text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
