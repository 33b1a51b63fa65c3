"""benchmarks/ray_vs_inline.py's pairs table on runs written here (CPU, no tuning): repeated runs are paired in
run order, and the medians and each pair's ratio come out as computed by hand."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from ray_vs_inline import pairs, remeasure_shape  # noqa: E402

def _run(name: str, wall: float, less: float, began: float | None = None, baseline_end: float | None = None) -> dict:
    """A run as ray_vs_inline.py records it, as far as the pairs table reads it."""
    phases = {"wall less re-measure s": less}
    if began is not None:
        phases["timeline: first build began on the actor at s"] = began
    if baseline_end is not None:
        phases["timeline: eager baseline from / to s"] = f"1.2 / {baseline_end}"
    return {"run": name, "kind": "inline" if name == "inline" else "ray", "wall_s": wall, "phases": phases}


def test_repeated_runs_are_paired_in_run_order_with_their_medians():
    # in the order they ran: inline, ray:1, inline, ray:1, inline, ray:1
    runs = [_run("inline", 43.8, 27.22, baseline_end=6.9), _run("ray:1", 60.0, 42.5, began=10.07),
            _run("inline", 35.3, 22.76, baseline_end=4.9), _run("ray:1", 42.5, 33.4, began=9.94),
            _run("inline", 32.8, 24.45, baseline_end=5.0), _run("ray:1", 40.8, 33.3, began=9.99)]
    rows = [line for line in pairs(runs) if line.startswith("| ray:1 ")]
    # medians 42.5 / 35.3 (1.20x); pairs 60.0/43.8, 42.5/35.3, 40.8/32.8; less the re-measure medians 33.4 /
    # 24.45 and pairs 42.5/27.22, 33.4/22.76, 33.3/24.45; first builds 10.07-6.9, 9.94-4.9, 9.99-5.0
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
    from aitune_ray.records.results import BuildResult
    from aitune_ray.report.model import ModuleReport, TuningReport

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
