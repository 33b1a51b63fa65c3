"""benchmarks/results_table.py: records a benchmark writes (or that `record` wraps) become rows of RESULTS.md's
tables, each with its date, machine and command (CPU; the records are made here, none is read from the
repository)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import results_table  # noqa: E402


def _table(text: str, title: str) -> list[dict]:
    """The rows of the table under the heading title, as dicts."""
    lines = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0].splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in row.strip("|").split("|")))) for row in rows[1:]]


def _title(benchmark: str) -> str:
    return next(q[1] for q in results_table.QUESTIONS if q[0] == benchmark)


def test_a_benchmarks_own_record_becomes_a_row_with_its_date_machine_and_command(tmp_path):
    """memory.py, run for real (inline, two tiny configurations): its --out JSON is a record as it stands."""
    out = tmp_path / "out" / "memory.md"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "memory.py"), "--device", "cpu", "--candidates", "2,3",
                    "--buffer-mb", "1", "--delay-ms", "1", "--out", str(out)], check=True, cwd=REPO, timeout=600,
                   capture_output=True)
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["benchmark"] == "memory" and "memory.py --device cpu --candidates 2,3" in record["command"]
    results = tmp_path / "results"
    results.mkdir()
    (results / "memory_here.json").write_text(json.dumps(record))
    table = tmp_path / "RESULTS.md"
    assert results_table.main(["--results", str(results), "--table", str(table)]) == 0
    rows = _table(table.read_text(), _title("memory"))
    two, three = sorted(record["result"], key=lambda r: r["candidates"])
    assert rows == [{"date": record["date"], "machine": record["machine"], "run": "inline", "candidates": "2 / 3",
                     "peak device MB": "-", "ratio": "-",
                     "peak RSS MB": f"{two['peak_rss_mb']:.0f} / {three['peak_rss_mb']:.0f}",
                     "RSS ratio": f"{three['peak_rss_mb'] / two['peak_rss_mb']:.2f}x",
                     "command": f"`{record['command']}`", "note": "",
                     "record": "[memory_here.json](results/memory_here.json)"}]
    assert "No recorded run yet." in table.read_text().split(f"## {_title('resume')}", 1)[1]


def _decision_rows(*flags: tuple[bool, bool, bool, bool]) -> list[dict]:
    return [{"bs": 8 * (i + 1), "chosen": "jit-ro", "slower_than_eager": slower, "agrees": agrees,
             "user_repeats_agree": repeat, "within_best": best} for i, (slower, agrees, repeat, best) in enumerate(flags)]


def test_record_wraps_a_decisions_file_and_the_row_counts_its_pairs_against_the_targets(tmp_path):
    native = tmp_path / "decisions.json"
    native.write_text(json.dumps({"runs": [
        {"model": "vit", "dispatch": True, "rows": _decision_rows((False, True, True, True), (False, False, True, True))},
        {"model": "vit", "dispatch": True, "rows": _decision_rows((True, True, False, False), (False, True, True, True))},
        {"model": "bert", "dispatch": False, "rows": [{"bs": 8, "chosen": None, "agrees": True}]}]}))
    results = tmp_path / "results"
    path = results_table.record("decisions", native, "1 x GPU, torch 9", "python benchmarks/decisions.py --runs 2",
                                date="2026-12-05", note="two runs", folder=results)
    assert path.name == "decisions_2026-12-05_1-x-gpu-torch-9.json"
    again = results_table.record("decisions", native, "1 x GPU, torch 9", "same", date="2026-12-05", folder=results)
    assert again.name == "decisions_2026-12-05_1-x-gpu-torch-9_2.json"   # a second run of the day keeps the first
    again.unlink()
    rows = _table(results_table.render(results_table.load_records(results)), _title("decisions"))
    vit, bert = rows
    assert (vit["model"], vit["tunings"], vit["chosen"]) == ("vit", "2", "jit-ro")
    assert vit["user reads it slower than eager (target 0)"] == "1 of 4"
    assert vit["tuner within 5% of the user"] == "3 of 4"
    assert vit["the user's repeat within 5% of the user"] == "3 of 4"
    assert vit["dispatch within 3% of the best single"] == "3 of 4"
    # figures a run did not record read "-", not "0 of n"
    assert (bert["chosen"], bert["the user's repeat within 5% of the user"]) == ("eager", "-")
    assert bert["dispatch within 3% of the best single"] == "-"
    assert vit["date"] == "2026-12-05" and vit["note"] == "two runs" and vit["command"].startswith("`python")


def _rvi_run(kind: str, wall: float, less: float, chosen: str, times: dict) -> dict:
    return {"run": kind, "kind": kind, "gpus": 2, "wall_s": wall, "overhead_s": 2.0 if kind == "ray" else None,
            "phases": {"wall less re-measure s": less}, "chosen": {"model": chosen},
            "candidates": {k: ["B", "ok", t, "#0"] for k, t in times.items()}}


def test_ray_against_inline_reads_the_medians_and_the_simulation_schedules_the_inline_times():
    times = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 4.0}
    inline = [_rvi_run("inline", 10.0, 8.0, "eager", times), _rvi_run("inline", 14.0, 9.0, "eager", times)]
    ray = [_rvi_run("ray", 9.0, 7.0, "jit", times), _rvi_run("ray", 12.0, 9.9, "eager", times),
           dict(_rvi_run("ray", 99.0, 99.0, "x", times), failed="timed out")]
    result = {"model": "mlp", "backends": list(times), "gpus": 2, "runs": {str(i): r for i, r in enumerate(inline + ray)},
              "inline": inline[0], "ray": ray[0]}
    [row] = results_table.ray_vs_inline_rows(result)
    assert row["runs (inline / Ray)"] == "2 / 2"                       # the failed run is left out
    assert (row["inline wall s"], row["Ray wall s"], row["Ray / inline"]) == ("12.0", "10.5", "0.88x")
    assert row["less the re-measure"] == f"{8.45 / 8.5:.2f}x" and row["chosen (inline; Ray)"] == "eager; eager, jit"
    [sim] = results_table.scaling_rows(result)
    # inline's 8 s of candidates on 2 GPUs, longest first: 4 | 1+1+1+1 = 4 s, plus Ray's 2 s overhead and
    # inline's 2 s outside the candidates
    assert sim["2 GPUs, longest first, s"] == "8.0" and sim["critical path s"] == "4.0"
    assert sim["1 GPU, longest first, s"] == "12.0"


def test_a_file_that_is_not_a_record_is_refused(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps([{"run": "inline"}]))
    with pytest.raises(SystemExit, match="not a benchmark record"):
        results_table.load_records(tmp_path)
    with pytest.raises(SystemExit, match="unknown benchmark"):
        results_table.record("nothing", tmp_path / "old.json", "m", "c", folder=tmp_path)


def test_gpu_run_and_the_benchmarks_page_name_only_files_that_exist():
    import re

    bench = REPO / "benchmarks"
    for page in (bench / "gpu_run.sh", bench / "README.md"):
        named = set(re.findall(r"\b((?:benchmarks|tests|examples|docs)/[\w/.-]+\.(?:py|md|sh|yaml))", page.read_text()))
        assert named, page
        assert sorted(p for p in named if not (REPO / p).exists()) == [], page
    scripts = {p.name for p in bench.glob("*.py")} - {"publish.py", "results_table.py"}
    readme = (bench / "README.md").read_text()
    assert sorted(s for s in scripts if f"`{s}" not in readme) == []   # every script answers a question listed there


def test_the_wrapper_cost_is_a_record_of_each_layers_microseconds(tmp_path):
    out = tmp_path / "w.md"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "backends.py"), "--wrapper-cost", "--calls", "200",
                    "--out", str(out)], check=True, cwd=REPO, timeout=300, capture_output=True)
    record = json.loads(out.with_suffix(".json").read_text())
    us = record["result"]["us_per_call"]
    assert record["benchmark"] == "wrapper" and set(us) == {
        "backend.infer()", "dispatch.infer() over two backends", "Module(...) with one backend",
        "Module(...) with the dispatch", "Module(...) with one backend, gradients on"}
    assert all(v > 0 for v in us.values())
    [row] = results_table.wrapper_rows(record["result"])
    assert row["Module(...) with the dispatch, us"] == f"{us['Module(...) with the dispatch']:.2f}"


def test_a_benchmarks_own_json_naming_its_script_is_read_as_its_record(tmp_path):
    """pipeline_schedule.py writes its own JSON (script, date, machine, command): a row as it stands."""
    own = {"script": "benchmarks/pipeline_schedule.py", "command": "benchmarks/pipeline_schedule.py --repeats 3",
           "date": "2026-12-05T11:30:32+00:00", "machine": "vm, 2 CPUs", "rows": [
               {"modules": 1, "builds": 3, "wall_s": 14.03, "over_one_module": 1.0, "goal": None, "met": None},
               {"modules": 3, "builds": 9, "wall_s": 24.77, "over_one_module": 1.765, "goal": 1.3, "met": False}]}
    (tmp_path / "pipeline.json").write_text(json.dumps(own))
    [record] = results_table.load_records(tmp_path)
    assert (record["benchmark"], record["date"], record["command"]) == (
        "pipeline_schedule", "2026-12-05", "python benchmarks/pipeline_schedule.py --repeats 3")
    rows = _table(results_table.render([record]), _title("pipeline_schedule"))
    assert [(r["modules"], r["wall s (median)"], r["x one module"], r["goal"], r["met"]) for r in rows] == [
        ("1", "14.0", "1.00x", "-", "-"), ("3", "24.8", "1.76x", "1.30x", "NO")]


def test_the_driver_memory_cycles_are_a_row_of_their_growth_per_cycle():
    cycles = [{"cycle": i, "rss_mb": 500.0 + i, "gc_objects": 1000 + 10 * i} for i in range(6)]
    [row] = results_table.driver_memory_rows({"contain": True, "cycles": cycles, "per_cycle_mb": 1.0,
                                              "per_cycle_objects": 10.0})
    assert row == {"builds": "in a child process", "cycles": 6, "RSS MB, first / last": "500 / 505",
                   "MB per cycle": "1.00", "objects per cycle": "10"}


@pytest.mark.slow
def test_the_zoos_record_becomes_a_pass_rate_table(tmp_path):
    """zoo.py, run for real on one model and one backend: a row per model with a cell per backend, and the
    totals per backend."""
    pytest.importorskip("transformers")
    out = tmp_path / "out" / "zoo.md"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--models", "bert", "--backends", "kernels",
                    "--rounds", "3", "--out", str(out)], check=True, cwd=REPO, timeout=600, capture_output=True)
    record = json.loads(out.with_suffix(".json").read_text())
    (row,) = record["result"]["rows"]
    assert record["benchmark"] == "zoo" and row["model"] == "bert" and row["backend"] == "kernels"
    results = tmp_path / "results"
    results.mkdir()
    (results / "zoo_here.json").write_text(json.dumps(record))
    table = tmp_path / "RESULTS.md"
    assert results_table.main(["--results", str(results), "--table", str(table)]) == 0
    bert, total = _table(table.read_text(), _title("zoo"))
    passed = row["build"] == "ok" and row["correct"] and row["round_trip"]
    assert bert["model"] == "bert" and bert["kernels"].startswith("pass" if passed else ("build", "correct", "round"))
    assert total["kernels"] == f"{int(row['build'] == 'ok')} / {int(bool(row['correct']))} / " \
                              f"{int(bool(row['round_trip']))} of 1"
