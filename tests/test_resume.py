"""Run folders: a killed job resumes and runs only what is missing; a folder of another run is refused."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aitune_ray as ait
from aitune_ray.command import cli
from aitune_ray.errors import RunFolderError
from aitune_ray.executors.run_dir import RunFolder
from aitune_ray.model.samples import Sample, SampleStore
from tests import resume_job

ROOT = Path(__file__).resolve().parent.parent


def builds(log: Path) -> list[int]:
    """Tags of the candidates built, in order (restores of stored results left out)."""
    return [int(line) for line in log.read_text().split() if line.isdigit()] if log.exists() else []


def restores(log: Path) -> list[int]:
    return [int(line[1:]) for line in log.read_text().split() if line.startswith("r")] if log.exists() else []


def killed_run(run_dir: Path, log: Path, block_tag: int) -> None:
    """Start the job in a driver process, SIGKILL it once it builds block_tag (the ones before are done)."""
    kill_when_blocked([sys.executable, "-m", "tests.resume_job", str(run_dir)], log, block_tag)


def kill_when_blocked(command: list[str], log: Path, block_tag: int) -> None:
    """Run command as a driver process whose gated build of block_tag prints BLOCKED, and SIGKILL it then."""
    env = dict(os.environ, AITUNE_TEST_BLOCK=str(block_tag), AITUNE_TEST_BUILD_LOG=str(log),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    driver = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        for line in driver.stdout:   # blocks until the driver prints; no timing involved
            if line.startswith("BLOCKED"):
                break
        else:
            pytest.fail(f"the driver ended (rc {driver.wait()}) before it reached the build of tag {block_tag}")
        driver.send_signal(signal.SIGKILL)
    finally:
        driver.wait()
        driver.stdout.close()
    assert driver.returncode == -signal.SIGKILL


def test_a_killed_driver_resumes_with_only_the_missing_candidates(tmp_path, monkeypatch):
    run_dir, log = tmp_path / "run", tmp_path / "builds.log"
    killed_run(run_dir, log, block_tag=3)
    assert builds(log) == [1, 2, 3]
    assert len(list((run_dir / "net" / "results").glob("*.json"))) == 2
    monkeypatch.setenv("AITUNE_TEST_BUILD_LOG", str(log))
    module, report = resume_job.run(run_dir)
    assert builds(log)[3:] == [3, 4]                       # the resumed run built only what was missing
    assert 1 in restores(log)                               # and restored the stored winner to re-measure it
    results = report.modules[0].results
    assert [r.spec["config"]["tag"] for r in results] == [1, 2, 3, 4]
    assert all(r.ok for r in results)
    assert report.modules[0].chosen_result().spec["config"]["tag"] == 1
    assert report.modules[0].remeasured_baseline            # finalists re-measured, replayed ones too
    chosen = report.modules[0].chosen_result()
    assert chosen.remeasured
    x = torch.randn(3, 8)
    torch.testing.assert_close(module(x), module.module.linear(x))
    # the resumed decision used the first run's samples and eager baseline
    stored = json.loads((run_dir / "net" / "baseline.json").read_text())
    assert {int(k): v for k, v in stored.items()} == report.modules[0].baseline


def test_a_finished_run_replays_every_result(tmp_path, monkeypatch):
    log = tmp_path / "builds.log"
    monkeypatch.setenv("AITUNE_TEST_BUILD_LOG", str(log))
    _, first = resume_job.run(tmp_path / "run")
    _, again = resume_job.run(tmp_path / "run")
    assert builds(log) == [1, 2, 3, 4]
    assert again.modules[0].chosen == first.modules[0].chosen
    assert [r.status for r in again.modules[0].results] == ["ok"] * 4


def test_a_run_folder_of_another_model_or_version_is_refused(tmp_path, monkeypatch):
    resume_job.run(tmp_path / "run")
    other = ait.Module(resume_job.make_model(), "net", strategy=ait.MaxThroughputStrategy(
        resume_job.backends(), measure_config=resume_job.MEASURE))
    with torch.no_grad():
        other.module.linear.weight.add_(1.0)
    with pytest.raises(RunFolderError, match="other weights"):
        ait.tune(other, resume_job.make_data(), executor=ait.InlineExecutor(), run_dir=tmp_path / "run",
                 call_as_given=True)
    monkeypatch.setattr("aitune_ray.version.__version__", "9.9.9")
    with pytest.raises(RunFolderError, match="9.9.9"):
        RunFolder.open(tmp_path / "run")
    with pytest.raises(RunFolderError, match="not a run folder"):
        (tmp_path / "stuff").mkdir()
        (tmp_path / "stuff" / "precious.txt").write_text("keep me")
        RunFolder.open(tmp_path / "stuff", mode="fresh")
    assert (tmp_path / "stuff" / "precious.txt").exists()


def test_changed_candidate_settings_are_refused(tmp_path):
    resume_job.run(tmp_path / "run")
    module = ait.Module(resume_job.make_model(), "net", strategy=ait.MaxThroughputStrategy(
        resume_job.backends(), measure_config=resume_job.MEASURE, tolerance=0.5))
    with pytest.raises(RunFolderError, match="other settings"):
        ait.tune(module, resume_job.make_data(), executor=ait.InlineExecutor(), run_dir=tmp_path / "run",
                 call_as_given=True)


def test_samples_round_trip_through_safetensors_and_json(tmp_path):
    point = collections.namedtuple("Point", "x y")
    sample = Sample(args=(torch.randn(2, 3).to(torch.bfloat16), [1, 2.5, None, "s"]),
                    kwargs={"mask": torch.ones(2, dtype=torch.bool), "p": point(torch.arange(3), True)},
                    outputs={"out": (torch.randn(2, 3)[:, 1], torch.zeros(0))}, batch_size=2)
    folder = RunFolder.open(tmp_path / "run")
    folder.module("m").samples(SampleStore([sample], calls_seen=7))
    assert not list(tmp_path.glob("**/*.pkl"))
    back = folder.module("m").samples(SampleStore([], calls_seen=0))   # read back, checked against the manifest
    assert back.calls_seen == 7 and len(back) == 1
    got = back.samples[0]
    torch.testing.assert_close(got.args[0], sample.args[0])
    assert got.args[1] == [1, 2.5, None, "s"]
    assert got.kwargs["p"].y is True and got.kwargs["p"]._fields == ("x", "y")
    torch.testing.assert_close(got.kwargs["mask"], sample.kwargs["mask"])
    torch.testing.assert_close(got.outputs["out"][0], sample.outputs["out"][0])
    assert got.outputs["out"][1].shape == (0,) and got.batch_size == 2


JOB = """\
model: tests.resume_job:make_model
data: tests.resume_job:make_data
strategy:
  type: MaxThroughput
  measure: {warmup_runs: 1, min_runs: 5, max_runs: 20, max_seconds: 0.2}
backends:
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 1}}
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 2, infer_delay_s: 0.002}}
executor: {type: inline}
device: cpu
"""


def test_cli_resume_and_fresh(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    log = tmp_path / "builds.log"
    monkeypatch.setenv("AITUNE_TEST_BUILD_LOG", str(log))
    (tmp_path / "job.yaml").write_text(JOB)
    assert cli.main(["tune", "job.yaml"]) == cli.EXIT_OK
    assert builds(log) == [1, 2] and json.loads((tmp_path / "job.ait.run" / "run.json").read_text())["complete"]
    assert cli.main(["tune", "--resume", "job.yaml"]) == cli.EXIT_OK     # a finished run: all replayed
    assert builds(log) == [1, 2]
    assert "2 candidate result(s) from the earlier run" in capsys.readouterr().out
    assert cli.main(["tune", "job.yaml"]) == cli.EXIT_OK                 # a finished run, no flag: starts over
    assert builds(log) == [1, 2, 1, 2]
    run = json.loads((tmp_path / "job.ait.run" / "run.json").read_text())
    folder = RunFolder.open(tmp_path / "job.ait.run", {"job": run["identity"]["job"]})   # through its manifest
    folder.write_json("run.json", {**run, "complete": False})
    folder.close()
    assert cli.main(["tune", "job.yaml"]) == cli.EXIT_FAILED             # unfinished: neither flag, refused
    assert "--resume continues it, --fresh starts over" in capsys.readouterr().err
    assert cli.main(["tune", "--fresh", "job.yaml"]) == cli.EXIT_OK
    assert builds(log) == [1, 2, 1, 2, 1, 2]
    (tmp_path / "job.yaml").write_text(JOB.replace("tag: 2,", "tag: 2, build_s: 0.0,"))
    assert cli.main(["tune", "--resume", "job.yaml"]) == cli.EXIT_FAILED  # another job file: refused
    assert "belongs to another run" in capsys.readouterr().err
