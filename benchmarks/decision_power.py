"""How often does the default rule plan a candidate that is truly faster, and how often one that is not?
The power table of docs/decisions.md, for backends and kernels alike, from simulated tunings of the real
procedure (aitune_ray.testing.sessions: every timing is its true time times 1 + N(0, noise)).

    python benchmarks/decision_power.py --tunings 1000     # simulate (CPU, minutes); JSON, then the docs table
    python benchmarks/decision_power.py --table            # rewrite the docs table from the JSON only
    python benchmarks/decision_power.py --check            # exit 1 when the docs table is not the JSON's

Backends: decision.choose (screening, a confirm session of the default CONFIRM_ROUNDS paired rounds at batch
sizes 8 and 32 called alike, the default Rule). Kernels: KernelOptimizer's choice (kernel_forge.selection on
the same decision.decide) with its own default final_rounds, at two recorded shapes called alike. Each
candidate is the only finalist ("alone", K = 1) or beside two finalists truly 1.00x and 0.99x ("beside two",
K = 3, the default cap): K divides alpha, so the second is the harder case. At 1.00x the figure is the
false-win rate: the share of tunings that chose a candidate truly no faster (alone, or any of three at 1.00x).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from aitune_ray.decision.rule import Rule  # noqa: E402
from aitune_ray.decision.session import CONFIRM_ROUNDS  # noqa: E402
from aitune_ray.kernel_forge.optimizer import KernelOptimizer  # noqa: E402
from aitune_ray.testing.sessions import SimCandidate, simulate_kernel_tunings, simulate_tunings  # noqa: E402
from results_table import record_of  # noqa: E402

JSON = HERE / "results" / "decision_power.json"
DOC = HERE.parent / "docs" / "decisions.md"
BEGIN, END = "<!-- power table: benchmarks/decision_power.py writes it from its JSON -->", "<!-- end of power table -->"
SPEEDUPS = (1.00, 1.05, 1.10, 1.20)
NOISES = (0.05, 0.10, 0.20)
FIELDS = ("alone", "beside two")
MIX, SHAPES = {8: 1, 32: 1}, {1: 1, 2: 1}


def candidates(speedup: float, field: str) -> list[SimCandidate]:
    if field == "alone":
        return [SimCandidate("c", speedup)]
    if speedup == 1.0:
        return [SimCandidate("c", 1.0), SimCandidate("r1", 1.0), SimCandidate("r2", 1.0)]
    return [SimCandidate("c", speedup), SimCandidate("r1", 1.0), SimCandidate("r2", 0.99)]


def cell(chooser: str, speedup: float, field: str, noise: float, tunings: int, seed: int) -> float:
    """The share of tunings that chose c (at 1.00x: anything)."""
    field_ = candidates(speedup, field)
    if chooser == "backends":
        chosen = [v.chosen for v in simulate_tunings(tunings, field_, MIX, noise, seed=seed)]
    else:
        chosen = simulate_kernel_tunings(tunings, field_, SHAPES, noise, seed=seed)
    hits = sum(c is not None for c in chosen) if speedup == 1.0 else sum(c == "c" for c in chosen)
    return hits / tunings


def simulate(tunings: int) -> dict:
    rule = Rule()
    rows, seed = [], 0
    for chooser in ("backends", "kernels"):
        for field in FIELDS:
            for speedup in SPEEDUPS:
                seed += 1
                rows.append({"chooser": chooser, "field": field, "speedup": speedup,
                             "chosen": {f"{noise:.2f}": cell(chooser, speedup, field, noise, tunings, seed * 10 + i)
                                        for i, noise in enumerate(NOISES)}})
    return {"tunings": tunings, "confirm_rounds": CONFIRM_ROUNDS, "kernel_rounds": KernelOptimizer().final_rounds,
            "rule": rule.settings(), "rows": rows}


def table(result: dict) -> str:
    """The docs table of a simulate() result."""
    rule = result["rule"]
    lines = [f"{result['tunings']} simulated tunings per cell; confirm rounds: backends {result['confirm_rounds']}, "
             f"kernels {result['kernel_rounds']}; gate {1 + rule['min_speedup_ratio']:.2f}x, tolerance "
             f"{rule['noise_tolerance']:.0%}, alpha {rule['alpha']}.", "",
             "| chooser | finalists | true speedup | " + " | ".join(f"{n:.0%} noise" for n in NOISES) + " |",
             "|---|---|---|" + "---|" * len(NOISES)]
    for row in result["rows"]:
        what = "1.00x (false win)" if row["speedup"] == 1.0 else f"{row['speedup']:.2f}x (planned)"
        cells = " | ".join(f"{row['chosen'][f'{n:.2f}']:.1%}" for n in NOISES)
        field = "1" if row["field"] == "alone" else "3 (beside two)"
        lines.append(f"| {row['chooser']} | {field} | {what} | {cells} |")
    return "\n".join(lines)


def spliced(doc: str, text: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOC.name} has no power table markers")
    return pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tunings", type=int, default=1000, help="simulated tunings per cell")
    parser.add_argument("--table", action="store_true", help="simulate nothing: the docs table from the JSON")
    parser.add_argument("--check", action="store_true", help="whether the docs table is the JSON's")
    args = parser.parse_args()
    if args.check or args.table:
        result = json.loads(JSON.read_text())["result"]
    else:
        started = time.perf_counter()
        result = simulate(args.tunings)
        record = record_of(result, "decision_power")
        record.update(machine="a simulation (aitune_ray.testing), no device",
                      command=f"python benchmarks/decision_power.py --tunings {args.tunings}")
        JSON.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{time.perf_counter() - started:.0f} s")
    text = table(result)
    doc = DOC.read_text()
    if args.check:
        return 0 if spliced(doc, text) == doc else 1
    DOC.write_text(spliced(doc, text))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
