"""The report and the checkpoint agree: when the module as loaded from the checkpoint loses to eager, the
checkpoint keeps eager and the report's answer, decision and table say so, on a first run and after
`tune --resume` alike.

Simulated time (aitune_ray.testing): the candidate is 4x faster than eager as tuned, and 10 ms slower per
call once restored from its recipe, as after a checkpoint load; the outcome is the same on any host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aitune_ray.command import cli
from aitune_ray.decision import screen_interval
from aitune_ray.checkpoint.inspection import inspect_checkpoint
from aitune_ray.measure import timing
from aitune_ray.testing import SIM_CLOCK

ROOT = Path(__file__).resolve().parent.parent
JOB = """\
model: aitune_ray.testing:SimAffine
model_args: {ms: 2.0, noise: 0.02}
data: tests.resume_job:make_data
modules: [{path: "", name: sim}]
strategy:
  type: MaxThroughput
  measure: {warmup_runs: 1, min_runs: 5, max_runs: 20, max_seconds: 0.2}
backends:
  - {type: "aitune_ray.testing:SimBackend", config: {tag: fast, ms: 0.5, noise: 0.02, restored_extra_ms: 10.0}}
executor: {type: inline}   # each build in a child process: the confirm session times it restored, as deployed
device: cpu
output: out/sim.ait
report: out/sim.md
"""


@pytest.fixture()
def sim_clock():
    SIM_CLOCK.slowness = 1.0
    with timing.use_clock(SIM_CLOCK):
        yield SIM_CLOCK
    SIM_CLOCK.slowness = 1.0


def assert_they_agree(folder: Path) -> tuple[dict, str, str]:
    """The checkpoint holds eager, and the report's JSON, Markdown and HTML all answer "keep eager"."""
    (module,) = inspect_checkpoint(folder / "out" / "sim.ait")["modules"]
    assert module["backend"] == "eager"                                    # what the file holds
    (record,) = json.loads((folder / "out" / "sim.json").read_text())["report"]["modules"]
    text, page = (folder / "out" / "sim.md").read_text(), (folder / "out" / "sim.html").read_text()
    assert record["chosen"] is None
    assert text.splitlines()[2].startswith("**sim: keep eager (") and "<p>sim: keep eager (" in page
    assert "| TorchEager (baseline) | kept (chosen) |" in text
    return record, text, page


def test_report_and_checkpoint_agree_on_a_first_run_and_after_resume(tmp_path, monkeypatch, capsys, sim_clock):
    """The candidate is faster as built but slower once restored from its recipe: the confirm session times
    it restored, as it is deployed, so eager is kept, and the checkpoint and every form of the report say so,
    on a first run and after `tune --resume` alike."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "job.yaml").write_text(JOB)
    assert cli.main(["tune", "job.yaml"]) == cli.EXIT_OK
    capsys.readouterr()
    _, text, page = assert_they_agree(tmp_path)
    assert "slower at a batch size" in text and "slower at a batch size" in page   # the confirm session's verdict
    assert cli.main(["tune", "--resume", "job.yaml"]) == cli.EXIT_OK
    assert "1 candidate result(s) from the earlier run" in capsys.readouterr().out
    _, text, page = assert_they_agree(tmp_path)
    assert "slower at a batch size" in text and "slower at a batch size" in page


def test_a_contained_build_measures_on_the_clock_of_the_run_and_a_resume_replays_it(tmp_path, monkeypatch, capsys,
                                                                                     sim_clock):
    """Each build runs in a child process (the command's default), which screens the candidate against eager
    there: on the simulated clock of this run, so the 4x candidate is screened 4x, confirmed and deployed,
    on a first run and, replayed from the run folder, after `tune --resume` alike. (A child that timed on
    the wall clock read the simulated calls' noise, pruned the candidate at screening, and kept eager:
    "no candidate built, ran correctly and was measured".)"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "job.yaml").write_text(JOB.replace(", restored_extra_ms: 10.0", ""))
    for command, said in ((["tune", "job.yaml"], "run folder: out/sim.ait.run\n"),
                          (["tune", "--resume", "job.yaml"], "1 candidate result(s) from the earlier run")):
        assert cli.main(command) == cli.EXIT_OK
        assert said in capsys.readouterr().out
        (record,) = json.loads((tmp_path / "out" / "sim.json").read_text())["report"]["modules"]
        (result,) = record["results"]
        assert record["chosen"] == result["key"], record["decision"]
        screened = screen_interval(result["screen"], {int(bs): n for bs, n in record["call_mix"].items()})
        assert 3.8 < screened.median < 4.2                                   # screened on the run's clock
        assert 3.8 < record["speedups"][result["key"]] < 4.2                 # and confirmed on it
        assert inspect_checkpoint(tmp_path / "out" / "sim.ait")["modules"][0]["backend"] != "eager"
