"""The report files: Markdown and HTML with the expected rows, valid PNGs, the timeline's spans, the
report command re-rendering from JSON, and columns the decision rule adds."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

import pytest
from PIL import Image

from aitune_ray.command.cli import main
from aitune_ray.report import render_run_file, spans, write_reports
from aitune_ray.report.events import EventRecorder, actor_row
from aitune_ray.report.candidates import details, summary_table
from aitune_ray.report.tables import module_report, plan_tables
from aitune_ray.report.model import ModuleReport
from tests.report_helpers import REPO, run_quick_job


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    import sys

    sys.path.insert(0, str(REPO))
    return run_quick_job(tmp_path_factory.mktemp("quick"))


def table_rows(markdown: str, first_cell: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines() if line.startswith("|")]
    return [r for r in rows if r[0].startswith(first_cell)]


def test_markdown_answers_first_then_a_narrow_summary_and_details(quick_report):
    text = quick_report.read_text()
    lines = [line for line in text.splitlines() if line]
    assert lines[0].startswith("# aitune-ray report")
    # the figures are this host's; where it was unfit to measure on, the answer says so too
    assert re.fullmatch(r"\*\*mlp: deploy TorchEagerBackend: [0-9.]+x( \[[0-9., ]+\])? as fast as eager over the "
                        r"recorded calls( \(the figure over the recorded calls is [^)]*\))? \(bs 4 [0-9.]+x.*, bs 16 [0-9.]+x.*; 95% intervals; measured on cpu with [0-9]+ torch "
                        r"threads?\)\.( Measured on a host "
                        r"unfit to measure on: see 'Host' below\.)?\*\*", lines[1]), lines[1]
    head = table_rows(text, "candidate")[0]
    assert head == ["candidate", "verdict", "speedup [95% interval]", "bs 4", "bs 16"]
    (eager,) = table_rows(text, "TorchEager (baseline)")
    (failed,) = table_rows(text, "RaisingBackend")
    (chosen,) = table_rows(text, "TorchEagerBackend")
    assert eager[1:] == ["baseline", "1x", "1x", "1x"]
    assert failed[head.index("verdict")] == "error" and failed[head.index("speedup [95% interval]")] == "-"
    assert chosen[head.index("verdict")] == "chosen"
    assert re.fullmatch(r"[0-9.]+x( \[[0-9.]+, [0-9.]+\])?", chosen[head.index("speedup [95% interval]")])
    # the details of each candidate, below the summary
    assert re.search(r"#### RaisingBackend[^\n]*: error\n", text) and "- error: " in text and "this backend always fails to build" in text
    assert re.search(r"- bs 16: speedup [0-9.]+x( \[[^\]]+\])?; [0-9.,]+ ms/call in a serving loop; single calls p50/p90 [0-9.]+/", text)
    assert "- Decision: chose TorchEagerBackend" in text
    # the post-deploy check is in the job's report too (this job turned performance validation off)
    assert "Post-deploy timing (the wrapped Module, as deployed, against eager; information only, the confirm " \
           "session decided): TorchEagerBackend: skipped: performance validation off" in text
    assert "![timeline](mlp-timeline.png)" in text and "driver's wall clock" in text


def test_html_is_self_contained_and_has_the_same_rows(quick_report):
    page = quick_report.with_suffix(".html").read_text()
    assert "<table class=\"candidates\"" in page
    assert page.count("<tr class=") == 3                                  # eager, failed, chosen
    assert re.search(r"<tr class=\"failed\"><td>RaisingBackend[^<]*</td><td>error</td>", page)
    assert "<tr class=\"chosen\"><td>TorchEagerBackend</td><td>chosen</td>" in page
    assert page.count("<details class=\"candidate\"><summary>") == 2         # the candidates' details, folded
    assert page.index("id=\"answer\"") < page.index("<table")
    assert page.count("src=\"data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_pngs_are_valid_images_of_sensible_size(quick_report):
    for name in ("mlp-speedup.png", "mlp-timeline.png"):
        with Image.open(quick_report.parent / name) as image:
            image.verify()
        with Image.open(quick_report.parent / name) as image:
            width, height = image.size
            assert 600 <= width <= 2500 and 150 <= height <= 2500, (name, image.size)
            colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
            assert colours is None or len(colours) > 20, name    # drawn on, not a blank canvas


def test_json_keeps_the_events_with_the_driver_clock(quick_report):
    run = json.loads(quick_report.with_suffix(".json").read_text())
    events = run["events"]
    builds = [e for e in events if e["task"] == "build"]
    assert [e["event"] for e in builds if e["event"] in ("building", "done")] == ["building", "done"] * 2
    assert [e["status"] for e in builds if e["event"] == "done"] == ["error", "ok"]
    assert [e["task"] for e in events if e["task"] != "build"] == ["baseline", "baseline", "remeasure", "remeasure"]
    times = [e["time"] for e in events]
    assert times == sorted(times) and times[-1] - times[0] < run["elapsed_s"] + 1
    bars = [s for s in spans(events) if s.candidate]
    # the command builds each candidate in a child process, which reports its build as one phase
    assert [(s.candidate, s.phase, s.status) for s in bars] == [
        ("RaisingBackend", "build", "error"), ("TorchEagerBackend", "build", "ok")]


def test_report_command_renders_the_same_files_again(quick_report, tmp_path):
    assert main(["report", str(quick_report.with_suffix(".json")), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "mlp.md").read_text() == quick_report.read_text()
    assert (tmp_path / "mlp.html").read_text() == quick_report.with_suffix(".html").read_text()
    assert (tmp_path / "mlp-timeline.png").stat().st_size > 1000


def test_without_matplotlib_the_tables_are_written_and_no_picture(quick_report, tmp_path, monkeypatch, capsys):
    """matplotlib is the 'report' extra: without it the report command (and a job's report) still writes the
    Markdown and HTML with every table, says how to get the pictures, and leaves no picture behind."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib raises ImportError
    assert main(["report", str(quick_report.with_suffix(".json")), "--out", str(tmp_path)]) == 0
    text, page = (tmp_path / "mlp.md").read_text(), (tmp_path / "mlp.html").read_text()
    for written in (text, page):
        assert "TorchEagerBackend" in written and "RaisingBackend" in written and "aitune-ray[report]" in written
    assert "<table" in page and "data:image/png" not in page and "![" not in text
    assert not list(tmp_path.glob("*.png"))


def test_report_command_rejects_what_is_not_a_run(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    assert main(["report", str(bad)]) == 2
    assert "is not a job's JSON report" in capsys.readouterr().err


@pytest.mark.parametrize("change", [
    lambda r: r["report"]["modules"].__setitem__(0, 2.5),
    lambda r: r["report"]["modules"][0]["results"][0].pop("status"),
    lambda r: r["report"]["modules"][0]["results"][0].update(timings=[1, 2]),
    lambda r: r["report"]["modules"][0].update(baseline=7),
    lambda r: r["events"][0].update(event=[[]])])
def test_report_command_answers_a_malformed_run_record_with_one_line_and_exit_code_2(quick_report, tmp_path, capsys,
                                                                                     change):
    run = json.loads(quick_report.with_suffix(".json").read_text())
    change(run)
    bad = tmp_path / "run.json"
    bad.write_text(json.dumps(run))
    assert main(["report", str(bad), "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out + err, err
    assert not list((tmp_path / "out").glob("run.*")), "a refused record left report files"


def test_the_report_replaces_a_symlink_planted_at_its_paths_and_never_writes_through_it(quick_report, tmp_path,
                                                                                        capsys):
    """Another user of the machine plants links where the report goes, to files of the victim's."""
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for name in ("mlp.md", "mlp.html", "mlp.json", "mlp-speedup.png", "mlp-timeline.png"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text(f"the victim's own {name}\n")
        (out / name).symlink_to(victim)
        victims[name] = victim
    assert main(["report", str(quick_report.with_suffix(".json")), "--out", str(out)]) == 0
    for name, victim in victims.items():
        assert victim.read_text() == f"the victim's own {name}\n", f"{name}: the report wrote through the symlink"
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 100
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [], "a temporary file was left"


def test_a_fifo_given_as_the_run_record_is_refused_without_hanging(tmp_path, capsys):
    from tests.test_checkpoint_security import within

    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    assert within(30, lambda: main(["report", str(fifo)])) == 2
    assert "FIFO" in capsys.readouterr().err


# ----- the timeline's spans from executor events --------------------------------------------------
def ray_like_events() -> list[dict]:
    """Events as the Ray executor emits them: two actors, a crash, a timeout, phases, one still running."""
    g0, g1 = {"node": "head (10.0.0.1)", "gpu": "NVIDIA H200 #0 (GPU-1234-abcd)"}, {"node": "w1", "gpu": "NVIDIA H200 #1"}
    e = [("a", "InductorJit", "building", "running", g0, 100.0), ("b", "AOT", "building", "running", g1, 100.5),
         ("a", "InductorJit", "measuring", "running", g0, 102.0), ("b", "AOT", "done", "crashed", g1, 101.0),
         ("a", "InductorJit", "done", "ok", g0, 103.0), ("c", "ORT", "queued", "waiting", {}, 100.0),
         ("c", "ORT", "building", "running", {}, 101.2), ("c", "ORT", "done", "timed out", g1, 104.0),
         ("d", "TorchAO", "building", "running", g0, 103.5)]
    return [{"module": "m", "key": k, "backend": b, "event": ev, "status": st, **where, "time": t}
            for k, b, ev, st, where, t in e]


def test_spans_pair_phases_and_outcomes_per_actor():
    bars = spans(ray_like_events())
    got = [(s.key, s.phase, s.row, s.status, s.start, s.end) for s in bars]
    assert got == [("a", "build", "NVIDIA H200 #0 @ head (10.0.0.1)", "ok", 100.0, 102.0),
                   ("b", "build", "NVIDIA H200 #1 @ w1", "crashed", 100.5, 101.0),
                   ("c", "build", "NVIDIA H200 #1 @ w1", "timed out", 101.2, 104.0),   # actor from its outcome
                   ("a", "profile", "NVIDIA H200 #0 @ head (10.0.0.1)", "ok", 102.0, 103.0),
                   ("d", "build", "NVIDIA H200 #0 @ head (10.0.0.1)", "unfinished", 103.5, 104.0)]


def test_spans_tolerate_missing_fields():
    events = [{"event": "building", "time": 1.0}, {"event": "done", "time": 2.0}, {"module": "m"}, "junk",
              {"key": "k", "task": "forge-benchmark", "event": "benchmarking", "time": 1.5},
              {"key": "k", "task": "forge-benchmark", "event": "done", "status": "ok", "time": 1.7}]
    bars = spans(events)
    assert [(s.row, s.phase, s.status) for s in bars] == [("driver", "build", "ok"),
                                                          ("driver", "provider benchmark", "ok")]
    assert actor_row("", "") == "driver" and actor_row("n", "cpu (actor 0)") == "cpu (actor 0) @ n"


def test_recorder_stamps_the_driver_clock_and_passes_events_on():
    seen = []
    recorder = EventRecorder(seen.append)
    recorder({"event": "building"})
    recorder({"event": "done", "time": 5.0})
    assert seen == recorder.events
    assert recorder.events[0]["time"] >= recorder.started and recorder.events[1]["time"] == 5.0


def test_timeline_png_marks_crashes_and_timeouts(tmp_path):
    run = {"report": {"modules": [], "failures": {}}, "events": ray_like_events()}
    written = write_reports(run, tmp_path / "r.md")
    with Image.open(written["timeline"]) as image:
        assert image.size[0] >= 600
    assert "speedup" not in written            # nothing was measured: no speedup picture
    assert "(no speedup picture" in written["md"].read_text()


# ----- columns that the decision rule adds to its rows ---------------------------------------------
def small_report() -> ModuleReport:
    timing = {"batch_size": 2, "median_ms": 2.0, "p90_ms": 2.5, "cv": 0.1, "runs": 10}
    fast = dict(timing, median_ms=1.0, p90_ms=1.2)
    plan = {"version": 1, "providers": [], "results": [
        {"function": "scaled_dot_product_attention", "description": "flash", "source": "provider", "status": "ok",
         "median_ms": 0.5, "speedup": 1.6, "max_error": 1e-3, "tolerance": 1e-2, "selected": True, "gpu": "g0"},
        {"function": "scaled_dot_product_attention", "description": "sage", "source": "provider",
         "status": "unsupported", "error": "sageattention is not installed", "gpu": "g0"}]}
    data = {"module": "enc", "strategy": "MaxThroughputStrategy", "device": "cuda", "call_mix": {"2": 3},
            "baseline": {"2": timing}, "chosen": "k1", "decision": "chose KernelSelectorBackend", "speedups": {"k1": 2.0},
            "verdict": {"confidence": 0.95},
            "results": [{"key": "k1", "backend": "KernelSelectorBackend", "spec": {"type": "x:KernelSelectorBackend"},
                         "status": "ok", "timings": {"2": fast}, "node": "n", "gpu": "g0", "log_path": "/logs/a.log",
                         "state": {"kernel_plan": plan}}]}
    return module_report(data)


def test_interval_and_added_columns_are_rendered(monkeypatch):
    original = ModuleReport.rows

    def rows_with_intervals(self):
        rows = original(self)
        for row in rows[1:]:
            row.update(speedup_bs2=2.0, speedup_low_bs2=1.8, speedup_high_bs2=2.2, speedup_low=1.7, speedup_high=2.1,
                       ms_per_call_bs2=0.9, raw_ms_per_call_bs2=1.1, margin_of_safety="wide")
        return rows

    monkeypatch.setattr(ModuleReport, "rows", rows_with_intervals)
    report = small_report()
    head, rows = summary_table(report)
    assert head == ["candidate", "verdict", "speedup [95% interval]", "bs 2"]
    assert rows[1] == ["KernelSelectorBackend", "chosen", "2x [1.7, 2.1]", "2x [1.8, 2.2]"]
    ((title, facts),) = details(report)
    facts = dict(facts)
    assert title == "KernelSelectorBackend: chosen" and facts["margin_of_safety"] == "wide"   # an added field
    assert facts["bs 2"].startswith("speedup 2x [1.8, 2.2]; 0.9 ms/call") and "raw_ms_per_call_bs2" not in facts
    assert "log" not in facts          # /logs/a.log does not exist: nothing links to it


def test_kernel_plan_table_lists_every_provider():
    (users, head, rows), = plan_tables(small_report())
    assert users == "KernelSelectorBackend"
    assert [r[head.index("provider")] for r in rows] == ["flash", "sage"]
    assert rows[0][head.index("chosen")] == "yes" and rows[0][head.index("speedup")] == "1.6x"
    assert "not installed" in rows[1][head.index("error")]


def test_render_run_file_from_a_hand_written_run(tmp_path):
    run = {"host": "h", "report": {"modules": [dict(small_report().to_dict())], "failures": {"head": "no samples"}}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    written = render_run_file(path)
    text = written["md"].read_text()
    assert "**kernel plan of KernelSelectorBackend**" in text and "Stayed eager: no samples" in text
    assert set(written) == {"md", "html", "speedup"}    # the JSON itself is not rewritten; no events, no timeline


def test_module_wide_tasks_are_named_by_phase_each_in_a_colour_of_its_own(tmp_path):
    """The baseline and the re-measure carry no candidate: their bars are named by phase, and every name in
    the legend (these and the candidates) has a colour no other name has."""
    from aitune_ray.report.plots import label_of as label, timeline_palette

    where = {"module": "m", "key": "", "backend": "", "node": "n", "gpu": "NVIDIA H200 #0"}
    events = [dict(where, task="baseline", event="measuring", time=1.0),
              dict(where, task="baseline", event="done", status="ok", time=2.0),
              dict(where, task="remeasure", event="remeasuring", time=3.0),
              dict(where, task="remeasure", event="done", status="ok", time=4.0)]
    bars = spans(events)
    assert [(label(s), s.row) for s in bars] == [("baseline (m)", "NVIDIA H200 #0 @ n"), ("re-measure (m)", "NVIDIA H200 #0 @ n")]
    from aitune_ray.report.plots import timeline_png

    png = timeline_png(bars)
    assert png and png[:8] == b"\x89PNG\r\n\x1a\n"
    palette = timeline_palette(bars + spans(ray_like_events()))
    assert len(palette) == 6 and len(set(palette.values())) == 6


def test_a_job_without_a_report_path_writes_it_next_to_the_checkpoint(tmp_path):
    import yaml

    from tests.report_helpers import quick_job

    job = quick_job(tmp_path)
    data = yaml.safe_load(job.read_text())
    del data["report"]
    job.write_text(yaml.safe_dump(data))
    assert main(["tune", "-q", str(job)]) == 0
    assert sorted(p.name for p in tmp_path.glob("mlp*")) == ["mlp-logs", "mlp-speedup.png", "mlp-timeline.png",
                                                             "mlp.ait", "mlp.ait.run", "mlp.html", "mlp.json", "mlp.md"]
    assert list((tmp_path / "mlp-logs").glob("*.log"))   # the failed build's log, kept beside the report


def test_eager_that_moved_between_its_first_timing_and_the_re_measure_is_said():
    """A host-bound eager call moves with the CPU it runs on; when it moved 1.2x or more within the tuning,
    the report says so, with both figures, since a user's own timing may then differ as much."""
    report = small_report()
    first = report.baseline[2]
    report.remeasured_baseline = {2: dict(first, median_ms=4.2)}
    text = report.markdown()
    assert report.eager_moved() == {2: (2.0, 4.2)}
    assert ("Eager moved during this tuning (bs 2: 2 ms/call at its first timing, 4.2 in the re-measure (2.10x))"
            in text)
    from aitune_ray.report.document import blocks

    run = {"report": {"modules": [report.to_dict()]}}
    assert any(b[0] == "list" and any(x.startswith("Eager moved") for x in b[2]) for b in blocks(run))   # the files too
    report.remeasured_baseline = {2: dict(first, median_ms=2.3)}   # 1.15x: within what clocks and noise move
    assert report.eager_moved() == {} and "Eager moved" not in report.markdown()
    report.remeasured_baseline = {}
    assert "Eager moved" not in report.markdown()


def test_config_column_shows_what_differs_from_the_defaults_so_variants_read_apart():
    from aitune_ray.backend.torch_inductor_jit import TorchInductorJitBackend, TorchInductorJitBackendConfig
    from aitune_ray.backend.torchao_backend import TorchAOBackend, TorchAOBackendConfig
    from aitune_ray.records.results import BuildResult

    def result(key, backend_or_spec):
        spec = backend_or_spec.spec() if hasattr(backend_or_spec, "spec") else backend_or_spec
        return BuildResult(key=key, backend="TorchInductorJitBackend", spec=spec, status="ok")

    default = TorchInductorJitBackend()
    static = TorchInductorJitBackend(TorchInductorJitBackendConfig(dynamic=False))
    dynamic = TorchInductorJitBackend(TorchInductorJitBackendConfig(dynamic=True, mode="reduce-overhead"))
    unknown = {"type": "somewhere.not_imported:Backend", "config": {"flag": False, "size": 3, "extra": None}}
    quantized = TorchAOBackend(TorchAOBackendConfig(quantization="int8wo"))
    report = ModuleReport(module="m", strategy="MaxThroughputStrategy", device="cpu", call_mix={2: 1}, baseline={},
                          results=[result("a", default), result("b", static), result("c", dynamic),
                                   result("d", unknown), result("e", quantized)])
    configs = [row["config"] for row in report.rows()[1:]]
    # False differs from the default None: it is shown; the unset defaults (fullgraph=False, mode=None) are not
    assert configs[:3] == ["", "dynamic=False", "dynamic=True,mode=reduce-overhead"]   # the config's field order
    # a class that is not registered (never imported to find its defaults): the settings that are set at all
    assert configs[3] == "size=3"
    # a setting that names the candidate stays in view where it equals the default
    assert configs[4].startswith("quantization=int8wo")


def test_a_speedup_that_moved_between_the_re_measure_and_the_post_deploy_check_is_said():
    from aitune_ray.records.results import BuildResult

    def report(checked_at_8):
        chosen = BuildResult(key="jit", backend="TorchInductorJitBackend", spec={}, status="ok")
        measured = {8: {"median": 3.83, "low": 3.5, "high": 4.2}, 32: {"median": 1.12, "low": 1.1, "high": 1.15}}
        check = {"key": "jit", "backend": "TorchInductorJitBackend", "verdict": "holds",
                 "intervals": {8: {"median": checked_at_8}, 32: {"median": 1.11}}}
        return ModuleReport(module="vit", strategy="MaxThroughputStrategy", device="cuda", call_mix={8: 2, 32: 1},
                            baseline={}, results=[chosen], chosen="jit", verdicts={"jit": {"intervals": measured}},
                            deploy_checks=[check])

    moved = report(2.40)
    assert moved.speedup_moved() == {8: (3.83, 2.40)}                     # bs 32 moved by under 10%: not said
    text = moved.speedup_moved_text()
    assert "bs 8: 3.83x in the re-measure, 2.4x in the post-deploy check" in text and "bs 32" not in text
    assert text in moved.markdown()
    # read back from JSON (string keys), as the report command renders it
    again = json.loads(json.dumps({"verdicts": moved.verdicts, "deploy_checks": moved.deploy_checks}))
    assert dataclasses.replace(moved, **again).speedup_moved() == {8: (3.83, 2.40)}
    steady = report(3.60)                                                  # 6% apart: within SPEEDUP_MOVED
    assert steady.speedup_moved() == {} and steady.speedup_moved_text() == ""
    assert dataclasses.replace(moved, chosen=None).speedup_moved() == {}  # eager kept: nothing to compare


def test_eager_moved_names_each_batch_size_whose_eager_time_moved_between_first_timing_and_confirm():
    report = ModuleReport(module="m", strategy="", device="cpu", call_mix={8: 1, 32: 3},
                          baseline={8: {"median_ms": 2.0}, 32: {"median_ms": 8.0}})
    assert report.eager_moved() == {}                               # no confirm session yet
    report.remeasured_baseline = {8: {"median_ms": 4.0}, 32: {"median_ms": 12.0}}
    assert set(report.eager_moved()) == {8, 32}
