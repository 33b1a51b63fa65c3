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

from aitune_ray import cli
from aitune_ray.inspection import inspect_checkpoint
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
    assert_they_agree(tmp_path)
    assert cli.main(["tune", "--resume", "job.yaml"]) == cli.EXIT_OK
    assert "1 candidate result(s) from the earlier run" in capsys.readouterr().out
    assert_they_agree(tmp_path)
