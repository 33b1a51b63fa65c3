"""Eager's host-bound call in one process, as that process changes; prints a table.

    python benchmarks/host_modes.py --bursts 30 --out host_modes.md

The ViT-B-sized fp16 encoder at batch 8 is host-bound on an H200: its ms per call is the Python and launch
cost of about 130 kernel launches. In the tuner's runs that figure moved between about 2.2 and 4.2 ms within
one process. This times it as a user's loop does (100 back-to-back calls, one synchronize, perf_counter), in
bursts, through phases that each add one thing a tuning adds to a process:

1. fresh: the model on the GPU, nothing else;
2. Inductor's compile workers started and a small function compiled (what a JIT build leaves behind);
3. a plain torch.profiler trace with CUDA activity, which leaves CUPTI attached (Kineto's default; the kernel
   profiler detaches it, except on a Ray driver, see aitune_ray/kernel_forge/profiler.py);
4. the same process pinned to the one CPU it ran on last (sched_setaffinity).

Per phase: the median, lowest and highest ms per call over the bursts, and the CPUs the loop ran on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from backends import make_model  # noqa: E402
from publish import publish  # noqa: E402


def current_cpu() -> int:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat)."""
    text = Path("/proc/thread-self/stat").read_text()
    return int(text.rsplit(")", 1)[1].split()[36])


def bursts(model, x, count: int, calls: int) -> tuple[list[float], set[int]]:
    times, cpus = [], set()
    with torch.no_grad():
        for _ in range(count):
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(calls):
                model(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - started) * 1000 / calls)
            cpus.add(current_cpu())
    return times, cpus


def encoder_at(batch: int, calls: int, script: str):
    """(model, x): the ViT-B-sized fp16 encoder on the GPU and an input at batch, warmed up by a few bursts of
    calls; script names the caller in the error on a machine without CUDA."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{script} needs a CUDA GPU")
    model, data = make_model("encoder", torch.device("cuda"), torch.float16)
    model = model.to("cuda", torch.float16).eval()
    x = torch.randn(batch, *data[0].shape[1:], device="cuda", dtype=torch.float16)
    bursts(model, x, 5, calls)
    return model, x


def compile_workers() -> None:
    from torch._inductor.async_compile import maybe_warm_pool

    maybe_warm_pool()
    compiled = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2.0 + 1.0)
    compiled(torch.randn(64, 64, device="cuda"))
    torch.cuda.synchronize()


def profile(model, x) -> None:
    from torch.profiler import ProfilerActivity

    with torch.no_grad(), torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bursts", type=int, default=30)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    model, x = encoder_at(args.batch, args.calls, "host_modes.py")
    phases = {}
    phases["fresh"] = bursts(model, x, args.bursts, args.calls)
    phases["fresh, again"] = bursts(model, x, args.bursts, args.calls)
    compile_workers()
    phases["after compile workers and a compile"] = bursts(model, x, args.bursts, args.calls)
    profile(model, x)
    phases["after a CUDA-activity profile"] = bursts(model, x, args.bursts, args.calls)
    last = current_cpu()
    os.sched_setaffinity(0, {last})
    phases[f"pinned to CPU {last}"] = bursts(model, x, args.bursts, args.calls)
    lines = [f"### Eager encoder fp16, batch {args.batch}: ms per call, {args.bursts} bursts of {args.calls} "
             f"calls per phase (CPUs: {os.cpu_count()})", "",
             "| phase | median | lowest | highest | CPUs seen |", "|---|---|---|---|---|"]
    for name, (times, cpus) in phases.items():
        lines.append(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} | "
                     f"{', '.join(str(c) for c in sorted(cpus))} |")
    publish("\n".join(lines), args.out,
            {name: {"ms": times, "cpus": sorted(cpus)} for name, (times, cpus) in phases.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
