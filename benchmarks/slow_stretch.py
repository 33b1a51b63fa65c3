"""A tuned module and eager, timed as a user's loop again and again after one tuning: does the speedup hold
through the host's slow stretches? Prints a table.

    python benchmarks/slow_stretch.py --device cpu --backend ao-int8wo --passes 40 --out slow_stretch.md

One tuning (MaxThroughput over the one candidate, inline), then --passes passes, each timing eager and the
deployed module at every recorded batch size (3 loops of 100 back-to-back calls each, the median), beside a
pure-Python probe (the same loop of integer additions every pass: the host's own speed for single-threaded
Python) and how many threads of this process took CPU time during the pass. --threads sets torch's
intra-op threads first. A pass in a slow stretch reads
eager, the deployed module and the probe slower; whether they slow alike decides whether the speedup holds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aitune_ray as ait  # noqa: E402
from aitune_ray.cluster import InlineExecutor  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from backends import BACKENDS  # noqa: E402
from decisions import batch_of, make_model, user_loop  # noqa: E402
from publish import publish  # noqa: E402


def thread_ticks() -> dict[str, int]:
    """Per thread of this process, the clock ticks of CPU time it has taken (user and system)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def probe_ms() -> float:
    started = time.perf_counter()
    total = 0
    for i in range(200_000):
        total += i
    return (time.perf_counter() - started) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="vit")
    parser.add_argument("--backend", default="ao-int8wo", help=f"one of {sorted(BACKENDS)}")
    parser.add_argument("--passes", type=int, default=40)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (0: as it starts)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    size = "base" if device.type == "cuda" else "tiny"
    model, items = make_model(args.model, device, size)
    eager = make_model(args.model, device, size)[0]
    strategy = ait.MaxThroughputStrategy([BACKENDS[args.backend]()],
                                         measure_config=MeasureConfig(max_seconds=1.0))
    module = ait.Module(model, name=args.model, strategy=strategy)
    report = ait.tune(module, items, device=device, executor=InlineExecutor(), call_as_given=True).modules[0]
    by_bs = {}
    for item in items:
        by_bs.setdefault(batch_of(item), item)
    rows, ticks, started = [], thread_ticks(), time.perf_counter()
    with torch.no_grad():
        for index in range(args.passes):
            row = {"pass": index + 1, "probe_ms": probe_ms(), "threads": torch.get_num_threads()}
            for bs, item in sorted(by_bs.items()):
                row[f"eager_{bs}"] = statistics.median(user_loop(eager, item, args.calls, device) for _ in range(3))
                row[f"module_{bs}"] = statistics.median(user_loop(module, item, args.calls, device) for _ in range(3))
            now = thread_ticks()
            row["busy_threads"] = sum(1 for tid, t in now.items() if t - ticks.get(tid, 0) > 0)
            row["s"], ticks = time.perf_counter() - started, now
            rows.append(row)
    sizes = sorted(by_bs)
    lines = [f"### {args.model} on {device.type}: eager and the module tuned with {args.backend}, "
             f"{args.passes} passes after one tuning, {torch.get_num_threads()} intra-op threads", "", f"Decision: {report.decision}", "",
             "| pass | s | probe ms | " + " | ".join(f"eager bs {bs} | module bs {bs} | speedup bs {bs}" for bs in sizes)
             + " | threads busy |", "|" + "---|" * (4 + 3 * len(sizes))]
    for r in rows:
        cells = " | ".join(f"{r[f'eager_{bs}']:.3f} | {r[f'module_{bs}']:.3f} | {r[f'eager_{bs}'] / r[f'module_{bs}']:.3f}x"
                           for bs in sizes)
        lines.append(f"| {r['pass']} | {r['s']:.1f} | {r['probe_ms']:.2f} | {cells} | {r['busy_threads']} |")
    publish("\n".join(lines), args.out, {"decision": report.decision, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
