"""What a fresh process pays before its first compile, in parts: torch, Inductor's import, Triton's launcher
utilities (built with the host's C compiler into an empty Triton cache), one after the other and with the
utilities built on a thread beside Inductor's import.

    python benchmarks/compiler_import.py --repeats 3 --out compiler_import.md

Each measurement is a fresh process with empty Inductor and Triton caches, as a new tuner actor's is. The
two variants alternate (AB BA ...), so that a drift of the machine falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from publish import child_result, fresh_caches, publish  # noqa: E402

VARIANTS = ("one after the other", "utilities beside the import")


def child(variant: str) -> None:
    import threading
    import time

    began = time.perf_counter()
    import torch  # noqa: F401

    parts = {"torch s": time.perf_counter() - began}

    def utilities() -> None:
        started = time.perf_counter()
        from triton.runtime import driver

        driver.active.utils   # noqa: B018 - built on first use
        parts["Triton utilities s"] = time.perf_counter() - started

    started = time.perf_counter()
    thread = None
    if variant == VARIANTS[1]:
        thread = threading.Thread(target=utilities)
        thread.start()
    import torch._inductor.compile_fx  # noqa: F401

    parts["Inductor import s"] = time.perf_counter() - started
    if thread is None:
        utilities()
    else:
        thread.join()
    parts["ready to compile, after torch s"] = time.perf_counter() - started
    print("RESULT " + json.dumps(parts), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="compiler_import.md")
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for i in range(args.repeats):
        for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            result = child_result([sys.executable, __file__, "--child", variant], fresh_caches(os.environ))
            rows[variant].append(result)
            print(f"{variant}: {result}", flush=True)
    keys = ["torch s", "Inductor import s", "Triton utilities s", "ready to compile, after torch s"]
    lines = [f"### Before the first compile, fresh processes ({args.repeats} each, median; each value in brackets)", "",
             "| variant | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for variant, results in rows.items():
        cells = [f"{statistics.median(r[k] for r in results):.2f} ({', '.join(f'{r[k]:.2f}' for r in results)})"
                 for k in keys]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    publish("\n".join(lines) + "\n", args.out, {"rows": rows})


if __name__ == "__main__":
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1])
    else:
        main()
