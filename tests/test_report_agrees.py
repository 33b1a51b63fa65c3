"""The report and the checkpoint agree: when the module as loaded from the checkpoint loses to eager, the
checkpoint keeps eager and the report's answer, decision and table say so, on a first run and after
`tune --resume` alike.

Simulated time (tests/sim_backends.py): the candidate is 4x faster than eager as tuned, and 10 ms slower per
call once restored from its recipe, as after a checkpoint load; the outcome is the same on any host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aitune_ray import cli
from aitune_ray.inspect import inspect_checkpoint
from aitune_ray.measure import timing
from tests.sim_backends import SIM_CLOCK

ROOT = Path(__file__).resolve().parent.parent
JOB = """\
model: tests.sim_backends:SimAffine
model_args: {ms: 2.0, noise: 0.02}
data: tests.resume_job:make_data
modules: [{path: "", name: sim}]
strategy:
  type: MaxThroughput
  measure: {warmup_runs: 1, min_runs: 5, max_runs: 20, max_seconds: 0.2}
backends:
  - {type: "tests.sim_backends:SimBackend", config: {tag: fast, ms: 0.5, noise: 0.02, restored_extra_ms: 10.0}}
executor: {type: inline, contain: false}   # built in this process: the tuning times the build itself, not its restore
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


def test_report_and_checkpoint_agree_after_the_check_as_loaded_and_after_resume(tmp_path, monkeypatch, capsys,
                                                                               sim_clock):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "job.yaml").write_text(JOB)
    assert cli.main(["tune", "job.yaml"]) == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert "post-deploy check of sim as loaded: slower than eager" in printed       # the simulated loss happened
    record, text, page = assert_they_agree(tmp_path)
    answer = "sim: keep eager (SimBackend was chosen but lost to eager as loaded from the checkpoint)"
    assert record["deploy_checks"][-1]["as_loaded"] and f"answer after the check as loaded: {answer}" in printed
    for written in (text, page):
        assert answer in written
        assert "as loaded from the checkpoint, SimBackend lost to eager" in written    # the decision's words
        assert "chosen, then lost to eager as loaded from the checkpoint" in written   # the candidate's verdict
    # resumed: the stored result is restored from its recipe for the re-measure, where it now loses outright
    assert cli.main(["tune", "--resume", "job.yaml"]) == cli.EXIT_OK
    assert "1 candidate result(s) from the earlier run" in capsys.readouterr().out
    record, text, page = assert_they_agree(tmp_path)
    assert "slower at a batch size" in text and "slower at a batch size" in page
