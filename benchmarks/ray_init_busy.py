"""How long a local ray.init() takes while the driver is busy, as RayExecutor starts it (on a thread of its own
while the main thread records and times eager): with the driver idle, with a busy thread in the same process
(which shares the GIL with the start), and with a busy separate process (which shares only the CPUs).

    python benchmarks/ray_init_busy.py --repeats 3 --out ray_init_busy.md

The busy work is what host-bound eager timing is: a small module's forward, again and again, on the CPU.
Each repeat of each mode is a fresh process; the modes take turns, repeat after repeat.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from publish import child_result, publish  # noqa: E402

MODES = {"idle": "the driver idle", "thread": "a busy thread in the driver", "process": "a busy separate process"}


def _busy(stop) -> None:
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(24)])
    x = torch.randn(2, 16)
    with torch.no_grad():
        while not stop.is_set():
            model(x)


def child(mode: str) -> float:
    """Seconds ray.init() took on a thread of its own, with the driver as mode says."""
    import ray

    stop = threading.Event() if mode != "process" else multiprocessing.get_context("spawn").Event()
    busy = None
    if mode == "thread":
        busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
    elif mode == "process":
        busy = multiprocessing.get_context("spawn").Process(target=_busy, args=(stop,), daemon=True)
    if busy is not None:
        busy.start()
    up, done, seconds = threading.Event(), threading.Event(), []

    def start() -> None:   # Ray's processes live as long as the thread that started them: it waits for done
        began = time.perf_counter()
        ray.init(include_dashboard=False, log_to_driver=False, num_cpus=2,
                 _system_config={"prestart_worker_first_driver": False, "enable_worker_prestart": False})
        seconds.append(time.perf_counter() - began)
        up.set()
        done.wait()

    threading.Thread(target=start, daemon=True).start()
    up.wait()
    stop.set()
    if busy is not None:
        busy.join()
    ray.shutdown()
    done.set()
    return seconds[0]


def run(mode: str) -> float:
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    return child_result([sys.executable, __file__, "--child", mode], env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", default=None, choices=list(MODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child)))
        return 0
    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            runs[mode].append(run(mode))
    lines = [f"### ray.init() on a thread of its own, the driver busy or not ({args.repeats} fresh processes "
             f"each, {os.cpu_count()} CPUs)", "", "| driver | median s | each s |", "|---|---|---|"]
    for mode, values in runs.items():
        lines.append(f"| {MODES[mode]} | {statistics.median(values):.2f} | "
                     + ", ".join(f"{v:.2f}" for v in values) + " |")
    publish("\n".join(lines), args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
