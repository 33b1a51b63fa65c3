"""What a tune + save + load cycle of one Inductor JIT candidate leaves in the driver; prints a table.

    python benchmarks/driver_memory.py --cycles 12             # builds in the driver's own process
    python benchmarks/driver_memory.py --cycles 10 --contain   # builds in a child process each

Each cycle tunes the MLP example (1 block of 64, OneBackend over TorchInductorJitBackend, no performance
gate, inline), saves the checkpoint, loads it into a fresh model and calls it once; then everything is
dropped and the garbage collected. The table shows the driver's resident memory and the count of objects
the garbage collector tracks after each cycle; the last line, the growth per cycle from cycle 3 on (the
first cycles pay one-time imports and caches). RELIABILITY.md ("Driver memory") says why it grows.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import TorchInductorJitBackend  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from examples.mlp.model import make_data, make_model  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--contain", action="store_true", help="build in a child process (InlineExecutor(contain=True))")
    args = parser.parse_args()
    data = make_data(batch_sizes=(4,), per_batch_size=2)
    measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aitune-ray-bench-") as folder:
        path = Path(folder) / "m.ait"
        for cycle in range(args.cycles):
            module = ait.Module(make_model(blocks=1), "mlp",
                                strategy=ait.OneBackendStrategy(TorchInductorJitBackend(), measure_config=measure))
            module.strategy.performance_validation = False
            ait.tune(module, data, call_as_given=True, executor=ait.InlineExecutor(remeasure_rounds=0, contain=args.contain))
            ait.save(module, path)
            fresh = ait.load(ait.Module(make_model(blocks=1), "mlp"), path)
            with torch.no_grad():
                fresh(data[0])
            del module, fresh
            gc.collect()
            rows.append((cycle, rss_mb(), len(gc.get_objects())))
    print(f"builds {'in a child process' if args.contain else 'in the driver'}; torch {torch.__version__}")
    print("| cycle | RSS (MB) | gc objects |\n|---|---|---|")
    for cycle, rss, objects in rows:
        print(f"| {cycle} | {rss:.1f} | {objects} |")
    if len(rows) > 4:
        first, last = rows[3], rows[-1]
        span = last[0] - first[0]
        print(f"per cycle from cycle 3: {(last[1] - first[1]) / span:.2f} MB, {(last[2] - first[2]) / span:.0f} objects")


if __name__ == "__main__":
    main()
