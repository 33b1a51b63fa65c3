"""Does a process exit once it is done? A driver that profiled with torch's CUDA profiler and used Ray, in
the combinations a tuning makes, each in a process of its own with a time limit; prints a table.

    python benchmarks/exit_check.py            # on a GPU machine

Variants: the profiler alone; Ray alone; the profiler, then Ray started and stopped; Ray started, the
profiler, Ray stopped; and those two with TEARDOWN_CUPTI=1 (Kineto finalizes CUPTI when profiling ends).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

CHILD = r'''
import os, sys, time
import torch
steps = sys.argv[1].split(",")
x = torch.randn(256, 256, device="cuda")
def profile():
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()
for step in steps:
    if step == "profile":
        profile()
    elif step == "ray-start":
        import ray
        ray.init(include_dashboard=False, log_to_driver=False, num_cpus=1)
    elif step == "ray-actor":
        import ray
        @ray.remote(num_gpus=1)
        class A:
            def f(self):
                return 1
        a = A.remote(); ray.get(a.f.remote()); ray.kill(a)
    elif step == "ray-stop":
        import ray
        ray.shutdown()
print("done", flush=True)
'''

VARIANTS = [
    ("profiler alone", "profile", {}),
    ("Ray alone (start, actor, stop)", "ray-start,ray-actor,ray-stop", {}),
    ("profiler, then Ray", "profile,ray-start,ray-actor,ray-stop", {}),
    ("Ray, profiler, Ray stopped", "ray-start,ray-actor,profile,ray-stop", {}),
    ("Ray, profiler, Ray stopped; TEARDOWN_CUPTI=1", "ray-start,ray-actor,profile,ray-stop", {"TEARDOWN_CUPTI": "1"}),
    ("profiler, then Ray; TEARDOWN_CUPTI=1", "profile,ray-start,ray-actor,ray-stop", {"TEARDOWN_CUPTI": "1"}),
]


def main() -> int:
    limit = float(os.environ.get("EXIT_CHECK_LIMIT_S", "60"))
    rows = ["| variant | steps | finished its steps | exited | seconds |", "|---|---|---|---|---|"]
    for name, steps, env in VARIANTS:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", CHILD, steps], env={**os.environ, **env},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=limit)
            exited = f"yes (code {proc.returncode})"
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            exited = f"no: killed after {limit:g} s"
        rows.append(f"| {name} | {steps} | {'yes' if 'done' in out else 'no'} | {exited} | "
                    f"{time.perf_counter() - started:.1f} |")
        print(rows[-1], flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
