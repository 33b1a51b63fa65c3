"""Run folders and outputs are data that can be hostile, like checkpoints: each test here is an attack made the way
someone who can write the folder (or hand the user a record) would make it, and checks what the project refuses
(CPU, no Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aitune_ray.command import cli

ROOT = Path(__file__).resolve().parent.parent

JOB = """\
model: tests.resume_job:make_model
data: tests.resume_job:make_data
strategy:
  type: MaxThroughput
  measure: {warmup_runs: 1, min_runs: 5, max_runs: 20, max_seconds: 0.2}
backends:
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 1}}
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 2, infer_delay_s: 0.002}}
executor: {type: inline, contain: false}
device: cpu
"""


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("AITUNE_TEST_BUILD_LOG", str(tmp_path / "builds.log"))
    (tmp_path / "job.yaml").write_text(JOB)
    return tmp_path / "job.yaml"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (symlinks as their target's text), by relative path."""
    return {str(p.relative_to(folder)): (str(p.readlink()).encode() if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def users_experiment(folder: Path) -> dict[str, bytes]:
    """Another tool's experiment folder: its own run.json, metrics and weights; no result of this project."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"experiment": "lr-sweep", "seed": 3, "complete": True}))
    (folder / "metrics.json").write_text(json.dumps({"accuracy": 0.91}))
    (folder / "model.pt").write_bytes(b"\x80\x02 the user's weights")
    return snapshot(folder)


# ----- attack 1: a folder of the user's files named as the run folder -----------------------------------
@pytest.mark.parametrize("flags", [[], ["--resume"], ["--fresh"]])
def test_a_folder_of_the_users_files_is_never_cleared(job, capsys, flags):
    """`tune --run-dir FOLDER` on a folder that holds a run.json of another tool and no results: refused in one
    line, with or without --resume / --fresh, and every file of it is still there, byte for byte."""
    experiment = job.parent / "experiment"
    before = users_experiment(experiment)
    capsys.readouterr()
    assert cli.main(["tune", "-q", *flags, "--run-dir", str(experiment), str(job)]) == cli.EXIT_FAILED
    assert "is not a run folder of aitune-ray" in one_error_line(capsys.readouterr().err)
    assert snapshot(experiment) == before
    assert not (job.parent / "builds.log").exists()   # nothing was tuned against it
