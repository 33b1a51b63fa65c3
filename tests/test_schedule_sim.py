"""benchmarks/schedule_sim.py on a hand-written ray_vs_inline.py JSON (CPU, no tuning)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import schedule_sim  # noqa: E402


def one_module() -> dict:
    """Five candidates of 1, 1, 1, 1 and 4 s (in that order); inline wall 10 s, Ray overhead 2 s."""
    times = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 4.0}
    return {"model": "mlp", "device": "cpu", "gpus": 2,
            "inline": {"wall_s": 10.0, "overhead_s": 0.0,
                       "candidates": {k: ["B", "ok", t, "cpu"] for k, t in times.items()}},
            "ray": {"wall_s": 9.0, "overhead_s": 2.0,
                    "candidates": {k: ["B", "ok", t + 0.5, "#0"] for k, t in times.items()}}}


def test_list_scheduling_arithmetic():
    # first-come on 2 GPUs: 1 | 1, 1 | 1, then 4 on GPU 0 -> 2 + 4 = 6; longest-first: 4 | 1+1+1+1 = 4
    assert schedule_sim.list_schedule([1, 1, 1, 1, 4], 2) == (6, [6, 2])
    assert schedule_sim.longest_first([1, 1, 1, 1, 4], 2) == (4, [4, 4])
    assert schedule_sim.list_schedule([2, 2, 3], 2)[0] == 5
    assert schedule_sim.longest_first([2, 2, 3], 2)[0] == 4
    assert schedule_sim.list_schedule([3, 1], 8) == (3, [3, 1, 0, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError):
        schedule_sim.list_schedule([1], 0)


def test_simulated_rows():
    data = one_module()
    one = schedule_sim.simulate(data, 1)
    # serial part = inline wall 10 - candidates 8 = 2; overhead = Ray's measured 2
    assert one["serial_s"] == pytest.approx(2.0) and one["overhead_s"] == pytest.approx(2.0)
    assert one["first_come_s"] == pytest.approx(12.0) and one["longest_first_s"] == pytest.approx(12.0)
    two = schedule_sim.simulate(data, 2)
    assert two["first_come_s"] == pytest.approx(10.0) and two["longest_first_s"] == pytest.approx(8.0)
    assert two["speedup_longest_first"] == pytest.approx(10 / 8)
    assert two["efficiency_longest_first"] == pytest.approx(10 / 8 / 2)
    assert two["critical_path_s"] == pytest.approx(4.0) and two["ratio_first_come"] == pytest.approx(2.5)
    eight = schedule_sim.simulate(data, 8, overhead_s=0.0, serial_s=0.0)
    assert eight["first_come_s"] == pytest.approx(4.0) and eight["ratio_longest_first"] == pytest.approx(1.0)
    # Ray's per-candidate times instead: each 0.5 s longer
    assert schedule_sim.simulate(data, 1, source="ray")["first_come_s"] == pytest.approx(2 + 2 + 10.5)


def test_modules_are_scheduled_one_after_another():
    data = one_module()
    data["inline"]["candidates"] = {f"{m}/{k}": ["B", "ok", t, "cpu"] for m in ("encoder", "head")
                                    for k, t in (("x", 3.0), ("y", 1.0))}
    data["inline"]["modules"] = {m: [f"{m}/x", f"{m}/y"] for m in ("encoder", "head")}
    data["inline"]["wall_s"] = 8.0
    row = schedule_sim.simulate(data, 2, overhead_s=1.0)
    assert row["serial_s"] == pytest.approx(0.0)
    assert row["first_come_s"] == pytest.approx(1 + 3 + 3)     # each module waits for its 3 s candidate
    assert row["critical_path_s"] == pytest.approx(6.0)


def test_command_labels_a_simulation(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(one_module()))
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "schedule_sim.py"), str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "SIMULATION" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [line.split("|")[1].strip() for line in rows] == ["1", "2", "4", "8"]
    assert "| 2 | 10.0 / 8.0 |" in out


def test_a_ray_only_run_is_simulated_against_an_estimated_inline():
    data = one_module()
    del data["inline"]
    two = schedule_sim.simulate(data, 2, source="ray")
    # Ray's times (1.5 x 4 and 4.5): inline estimated as their sum 10.5 (no serial part known)
    assert two["serial_s"] == 0.0 and two["longest_first_s"] == pytest.approx(2 + 6.0)
    assert two["speedup_longest_first"] == pytest.approx(10.5 / 8.0)
    text = schedule_sim.table(data, [1, 2], None, None, "ray")
    assert "SIMULATION" in text and "no inline run" in text and "estimated inline" in text
