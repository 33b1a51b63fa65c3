"""The command's progress view (plain lines, the live table, JSON lines) and its -q / --log-json flags."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from aitune_ray.command.cli import main
from aitune_ray.command.progress import ProgressView, event_line
from tests.report_helpers import REPO, quick_job

EVENTS = [{"module": "m", "key": "a", "backend": "Inductor", "event": "building", "node": "n1", "gpu": "H200 #0"},
          {"module": "m", "key": "b", "backend": "AOT", "event": "queued"},
          {"module": "m", "key": "a", "backend": "Inductor", "event": "measuring", "node": "n1", "gpu": "H200 #0"},
          {"module": "m", "key": "a", "backend": "Inductor", "event": "done", "status": "ok", "elapsed_s": 2.5,
           "node": "n1", "gpu": "H200 #0", "speedup": 1.7},
          {"module": "m", "key": "b", "backend": "AOT", "event": "done", "status": "crashed", "elapsed_s": 0.4}]


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def test_plain_lines_without_a_terminal():
    out = io.StringIO()
    view = ProgressView(out)
    assert not view.live                      # a StringIO is not a terminal
    with view:
        for event in EVENTS:
            view(event)
    assert out.getvalue().splitlines() == [
        "[m] building  Inductor on n1, H200 #0", "[m] queued    AOT", "[m] measuring Inductor on n1, H200 #0",
        "[m] done    Inductor: ok after 2.5 s on n1, H200 #0", "[m] FAILED  AOT: crashed after 0.4 s"]


def test_live_table_rows_states_and_best():
    view = ProgressView(io.StringIO(), live=True)
    for event in EVENTS[:3]:
        view(event)
    assert [(r["backend"], r["state"], r["where"]) for r in view.rows.values()] == [
        ("Inductor", "measuring", "H200 #0 @ n1"), ("AOT", "queued", "")]
    for event in EVENTS[3:]:
        view(event)
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(view.table())
    text = console.file.getvalue()
    assert "best so far: m: Inductor (1.70x)" in text
    lines = [line for line in text.splitlines() if "Inductor" in line or "AOT" in line]
    assert "ok" in lines[0] and "2.5 s" in lines[0] and "H200 #0 @ n1" in lines[0]
    assert "crashed" in lines[1] and "0.4 s" in lines[1]


def test_json_lines():
    out = io.StringIO()
    view = ProgressView(out, json_lines=True)
    view(EVENTS[0])
    assert json.loads(out.getvalue()) == EVENTS[0]
    assert event_line({"event": "done", "status": "cancelled"}) == "[?] stopped ?: cancelled"


def test_module_wide_tasks_have_rows_and_lines_of_their_own():
    """The baseline and the re-measure carry no candidate: each is named by its task, in its own row."""
    base = {"module": "m", "key": "", "backend": "", "node": "n1", "gpu": "cpu"}
    events = [dict(base, task="baseline", event="measuring"), dict(base, task="baseline", event="done", status="ok",
              elapsed_s=1.0), dict(base, task="remeasure", event="remeasuring")]
    view = ProgressView(io.StringIO(), live=True)
    for event in events:
        view(event)
    assert [(r["backend"], r["state"]) for r in view.rows.values()] == [("baseline", "ok"), ("remeasure", "re-measuring")]
    assert [event_line(e) for e in events] == ["[m] measuring baseline on n1, cpu",
                                               "[m] done    baseline: ok after 1.0 s on n1, cpu",
                                               "[m] re-measuring remeasure on n1, cpu"]


def test_quiet_prints_nothing_and_log_json_prints_json(tmp_path, capsys):
    job = quick_job(tmp_path)
    assert main(["tune", "-q", str(job)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert main(["tune", "--log-json", "-v", str(job)]) == 0
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    build = [e["event"] for e in events if e["task"] == "build"]
    assert build[:2] == ["queued", "queued"] and build[2] == "building" and build[-1] == "done"
    assert build.count("building") == build.count("done") == 2
    assert set(build[2:]) <= {"building", "checking", "measuring", "done"}
    assert [(e["task"], e["event"]) for e in events if e["task"] != "build"][:2] == [("baseline", "measuring"),
                                                                                    ("baseline", "done")]
    logs = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{\"time\"")]
    assert logs and all({"time", "level", "logger", "message"} <= set(r) for r in logs)
    assert any(r["logger"].startswith("aitune_ray") for r in logs)
