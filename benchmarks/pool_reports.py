"""Pool several ray_vs_inline.py results of one job: Ray against inline over all their pairs, and the
re-measured candidates split by whether they were restored for the re-measure.

    python benchmarks/pool_reports.py benchmarks/results/ray1_vs_inline_encoder_fp16_bytecode_h200_*.json \
        benchmarks/results/ray1_vs_inline_encoder_fp16_futility_h200.json

Pairs: within each file the i-th Ray run goes with the i-th inline run (as ray_vs_inline.py pairs them);
the pooled figures are the medians of all walls on each side and the median of the pair ratios.

Restored or kept: MaxThroughput releases a build whose first timings put it more than remeasure_margin
(10%) behind the best over the recorded mix, and restores it from its recipe should a later group re-time
it (max_throughput_strategy._release_out_of_reach). From each report's first timings (the re-measure's
line "ms/call (first timing)" and the unpaired rows' ms/call) this tells which re-measured candidates
were restored, and gives each one's speed at every recorded size in the re-measure: eager's ms per call
over the candidate's, in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

MARGIN = 0.10
_MIX = re.compile(r"recorded batch sizes ([^)]*\([^)]*\)(?:, [^)]*\([^)]*\))*)")
_SIZE = re.compile(r"(\d+) \(x(\d+)\)")
_LINE = re.compile(r"ms/call \(first timing\): (.*)")
_ENTRY = re.compile(r"bs(\d+) ([\d.]+) \(([\d.]+)\)")
_MS = re.compile(r"; [\d,]+, ([\d.]+);")


def call_mix(markdown: str) -> dict[int, int]:
    found = _MIX.search(markdown)
    return {int(bs): int(n) for bs, n in _SIZE.findall(found.group(1))} if found else {}


def remeasured(markdown: str) -> tuple[dict[int, float], list[dict[int, tuple[float, float]]]]:
    """(eager's re-measured ms per size, per re-measured candidate {size: (re-measured ms, first ms)})."""
    found = _LINE.search(markdown)
    if not found:
        return {}, []
    eager, cands = {}, []
    for part in found.group(1).split("; "):
        name, _, rest = part.partition(": ")
        per = {int(bs): (float(again), float(first)) for bs, again, first in _ENTRY.findall(rest)}
        if name.startswith("TorchEager"):
            eager = {bs: again for bs, (again, _) in per.items()}
        else:
            cands.append(per)
    return eager, cands


def unpaired_first(markdown: str, sizes: list[int]) -> list[dict[int, float]]:
    """The first timings (ms per call per size) of the candidates that were not re-measured."""
    out = []
    lines = markdown.splitlines()
    header = next((l for l in lines if l.startswith("| backend | config | status")), None)
    if header is None:
        return out
    columns = [c.strip() for c in header.split("|")]
    at = {bs: next(i for i, c in enumerate(columns) if c.startswith(f"bs{bs} ")) for bs in sizes}
    for line in lines:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != len(columns) or "unpaired bursts" not in line:
            continue
        ms = {bs: _MS.search(cells[i]) for bs, i in at.items()}
        if all(ms.values()):
            out.append({bs: float(m.group(1)) for bs, m in ms.items()})
    return out


def split_restored(markdown: str) -> tuple[list[dict[int, float]], list[dict[int, float]]]:
    """(restored, kept): per re-measured candidate, its speedup over eager per size in the re-measure."""
    mix = call_mix(markdown)
    eager, cands = remeasured(markdown)
    if not mix or not cands:
        return [], []

    def mix_ms(first: dict[int, float]) -> float:
        return sum(n * first[bs] for bs, n in mix.items())

    firsts = [{bs: per[bs][1] for bs in mix} for per in cands] + unpaired_first(markdown, list(mix))
    best = min(mix_ms(f) for f in firsts)
    restored, kept = [], []
    for per in cands:
        speed = {bs: eager[bs] / per[bs][0] for bs in mix}
        (restored if mix_ms({bs: per[bs][1] for bs in mix}) > best * (1 + MARGIN) else kept).append(speed)
    return restored, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    ray_walls, inline_walls, ratios = [], [], []
    restored, kept = [], []
    for path in args.files:
        runs = json.loads(Path(path).read_text())["runs"]
        ray = [r["wall_s"] for name, r in runs.items() if name.startswith("ray")]
        inline = [r["wall_s"] for name, r in runs.items() if name.startswith("inline")]
        ray_walls += ray
        inline_walls += inline
        ratios += [a / b for a, b in zip(ray, inline)]
        for run in runs.values():
            r, k = split_restored(run.get("markdown", ""))
            restored += r
            kept += k
    print(f"### {len(args.files)} result file(s), {len(ratios)} pairs\n")
    print("| | Ray | inline | ratio |\n|---|---|---|---|")
    print(f"| median wall s | {statistics.median(ray_walls):.1f} | {statistics.median(inline_walls):.1f} | "
          f"{statistics.median(ray_walls) / statistics.median(inline_walls):.2f}x |")
    print(f"| median of the pair ratios | | | {statistics.median(ratios):.2f}x |")
    print(f"| pair ratios, sorted | | | {', '.join(f'{q:.2f}' for q in sorted(ratios))} |\n")
    sizes = sorted({bs for s in restored + kept for bs in s})
    print("| re-measured candidates | count | " + " | ".join(f"speedup at bs {bs}: min, median, max" for bs in sizes)
          + " |\n|---|---|" + "---|" * len(sizes))
    for label, group in (("restored for the re-measure", restored), ("kept from their build", kept)):
        cells = [", ".join(f"{f(s[bs] for s in group):.2f}x" for f in (min, statistics.median, max)) if group else "-"
                 for bs in sizes]
        print(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
