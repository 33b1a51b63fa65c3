"""Python's bytecode caches on this machine, and what a fresh process pays for an import; --write writes them.

    python benchmarks/bytecode.py                  # which packages every new process compiles from source
    python benchmarks/bytecode.py --write          # write the caches, as `pip install` does, then time again

A machine whose packages were installed without bytecode caches, with PYTHONDONTWRITEBYTECODE set, compiles
torch, Inductor and Ray from source in every new process: the driver, Ray's own processes and every tuner
actor (aitune_ray/bytecode.py). A user's `pip install` writes the caches, so the benchmarks write them before
they time anything. This prints which packages lack them, times importing ray, torch and Inductor in fresh
processes, and with --write compiles every folder on the path that holds those packages (and this
repository), then times the imports again.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aitune_ray.bytecode import PACKAGES, folders, uncached  # noqa: E402

IMPORTS = ("ray", "torch", "torch._inductor.compile_fx")


def import_seconds(module: str) -> float:
    """Seconds a fresh interpreter takes to import module (its start excluded)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else float("nan")


def timings(repeats: int) -> str:
    rows = {m: [import_seconds(m) for _ in range(repeats)] for m in IMPORTS}
    return "; ".join(f"{m} " + ", ".join(f"{s:.2f}" for s in t) + " s" for m, t in rows.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the missing caches, then time again")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    missing = uncached()
    print(f"PYTHONDONTWRITEBYTECODE: {'set' if sys.flags.dont_write_bytecode else 'not set'}; "
          f"compiled from source in every new process: {', '.join(missing) or 'none'} (of {', '.join(PACKAGES)})")
    print(f"imports in fresh processes: {timings(args.repeats)}")
    if not args.write or not missing:
        return 0
    targets = folders(missing) + [str(ROOT)]
    started = time.perf_counter()
    for folder in targets:
        compileall.compile_dir(folder, quiet=2, workers=os.cpu_count() or 1)
    print(f"wrote the caches of {len(targets)} folder(s) in {time.perf_counter() - started:.0f} s; "
          f"still without them: {', '.join(uncached()) or 'none'}")
    print(f"imports in fresh processes: {timings(args.repeats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
