"""benchmarks/ray_vs_inline.py's pairs table on a recorded result (CPU, no tuning): repeated runs are paired in
run order, and the medians and each pair's ratio come out as computed by hand from the run table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from ray_vs_inline import pairs, remeasure_shape  # noqa: E402

RECORDED = REPO / "benchmarks" / "results" / "ray1_vs_inline_encoder_fp16_builds_during_profile_h200.json"


def test_repeated_runs_are_paired_in_run_order_with_their_medians():
    runs = list(json.loads(RECORDED.read_text())["runs"].values())   # inline, ray:1, inline, ray:1, ...
    rows = [line for line in pairs(runs) if line.startswith("| ray:1 ")]
    # walls: inline 43.8, 35.3, 32.8; ray:1 60.0, 42.5, 40.8. Less the re-measure: 27.22, 22.76, 24.45 and
    # 42.5, 33.4, 33.3. Ray's first builds began at 10.07, 9.94 and 9.99 s; inline's baselines ended at 6.9,
    # 4.9 and 5.0 s.
    assert rows == ["| ray:1 | 3 | 42.5 / 35.3 s, 1.20x | 1.37x, 1.20x, 1.24x | 33.4 / 24.4 s, 1.37x | "
                    "1.56x, 1.47x, 1.36x | 3.2, 5.0, 5.0 s |"]


def test_a_failed_run_is_left_out_and_single_runs_get_no_table():
    def run(name, kind, wall, less=None):
        return {"run": name, "kind": kind, "wall_s": wall, "phases": {"wall less re-measure s": less or wall}}

    assert pairs([run("inline", "inline", 10.0), run("ray:1", "ray", 12.0)]) == []
    runs = [run("inline", "inline", 10.0), run("ray:1", "ray", 12.0), run("inline", "inline", 20.0),
            {"run": "ray:1", "kind": "ray", "wall_s": 99.0, "failed": "timed out"}, run("ray:1", "ray", 21.0)]
    rows = [line for line in pairs(runs) if line.startswith("| ray:1 ")]
    assert rows == ["| ray:1 | 2 | 16.5 / 15.0 s, 1.10x | 1.20x, 1.05x | 16.5 / 15.0 s, 1.10x | 1.20x, 1.05x | - |"]


def test_the_remeasure_shape_counts_the_candidates_re_timed_their_rounds_and_eagers_first_timing():
    from aitune_ray.results import BuildResult
    from aitune_ray.tune_strategy.report import ModuleReport, TuningReport

    def result(key, remeasured):
        return BuildResult(key=key, backend="B", spec={}, status="ok", remeasured=remeasured)

    module = ModuleReport(module="encoder", strategy="MaxThroughputStrategy", device="cuda", call_mix={8: 2, 128: 1},
                          baseline={8: {"median_ms": 3.97041}, 128: {"median_ms": 10.5}},
                          results=[result("a", {8: {}, 128: {}}), result("b", {8: {}, 128: {}}), result("c", {})],
                          verdicts={"a": {"interval": {"rounds": 60}}, "b": {"interval": {"rounds": 30}}, "c": {}})
    assert remeasure_shape(TuningReport(modules=[module])) == {
        "re-measure: candidates re-timed": 2, "re-measure: most paired rounds": 60,
        "eager's first timing at bs 8 ms": 3.97, "eager's first timing at bs 128 ms": 10.5}
    two = remeasure_shape(TuningReport(modules=[module, ModuleReport(module="head", strategy="S", device="cuda",
                                                                     call_mix={8: 1}, baseline={})]))
    assert two["encoder: re-measure: candidates re-timed"] == 2 and two["head: re-measure: most paired rounds"] == 0


# ----- benchmarks/pool_reports.py -------------------------------------------------------------------------


def _report(first_ms: list[tuple[float, float]], again_ms: list[tuple[float, float]], eager: tuple[float, float]) -> str:
    """A report's markdown as far as pool_reports reads it: the mix and the re-measure's line."""
    entries = [f"TorchEager (baseline): bs8 {eager[0]} ({eager[0]}), bs128 {eager[1]} ({eager[1]})"]
    entries += [f"TorchInductorJitBackend: bs8 {a[0]} ({f[0]}), bs128 {a[1]} ({f[1]})" for f, a in zip(first_ms, again_ms)]
    return ("### encoder (MaxThroughputStrategy on cuda:0; recorded batch sizes 8 (x2), 128 (x1))\n\n"
            "Re-measured side by side with eager on one device, ms/call (first timing): " + "; ".join(entries) + "\n")


def test_a_candidate_whose_first_timings_were_over_the_margin_behind_the_best_counts_as_restored():
    from pool_reports import split_restored

    # mix times 2 x bs8 + bs128: best 2*2+10 = 14; within 10% up to 15.4; 2*2.7+10 = 15.4 is not over it
    md = _report(first_ms=[(2.0, 10.0), (2.7, 10.0), (2.75, 10.0)], again_ms=[(2.2, 10.0), (2.4, 10.0), (1.6, 10.0)],
                 eager=(2.0, 10.0))
    restored, kept = split_restored(md)
    assert restored == [{8: 2.0 / 1.6, 128: 1.0}]
    assert kept == [{8: 2.0 / 2.2, 128: 1.0}, {8: 2.0 / 2.4, 128: 1.0}]


def test_the_recorded_h200_runs_pool_to_the_figures_the_readme_gives():
    import statistics

    from pool_reports import split_restored

    files = sorted((REPO / "benchmarks" / "results").glob("ray1_vs_inline_encoder_fp16_bytecode_h200_*.json"))
    files.append(REPO / "benchmarks" / "results" / "ray1_vs_inline_encoder_fp16_futility_h200.json")
    restored, kept, ratios = [], [], []
    for path in files:
        runs = json.loads(path.read_text())["runs"]
        ray = [r["wall_s"] for n, r in runs.items() if n.startswith("ray")]
        inline = [r["wall_s"] for n, r in runs.items() if n.startswith("inline")]
        ratios += [a / b for a, b in zip(ray, inline)]
        for run in runs.values():
            r, k = split_restored(run["markdown"])
            restored, kept = restored + r, kept + k
    assert len(ratios) == 13 and round(statistics.median(ratios), 2) == 1.15
    assert len(restored) == 6 and min(s[8] for s in restored) > 1.2
    assert len(kept) == 54 and max(s[8] for s in kept) < 1.1 and round(statistics.median(s[8] for s in kept), 2) == 0.94
