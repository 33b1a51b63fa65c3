"""Jobs of several models: one schedule, a checkpoint and a report per model; a bad entry refused first."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml

import aitune_ray as ait
from aitune_ray.command.cli import main
from aitune_ray.errors import ConfigError
from aitune_ray.command.job import load_jobs

REPO = Path(__file__).resolve().parents[1]
FAST_MEASURE = {"warmup_runs": 1, "min_runs": 3, "max_runs": 10, "max_seconds": 0.1}


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def mlp_entry(tmp_path: Path, name: str, blocks: int) -> dict:
    return {"name": name, "model": "examples.mlp.model:make_model", "model_args": {"blocks": blocks, "width": 16},
            "data": "examples.mlp.model:make_data", "data_args": {"batch_sizes": [4], "per_batch_size": 2, "width": 16},
            "modules": [{"path": "", "name": "mlp"}],
            "strategy": {"type": "OneBackend", "performance_validation": False, "measure": FAST_MEASURE,
                         "deploy_check_rounds": 0},
            "backends": [{"type": "TorchEagerBackend"}],
            "output": str(tmp_path / f"{name}.ait"), "report": str(tmp_path / f"{name}.md")}


def two_models(tmp_path: Path, executor: dict) -> dict:
    return {"device": "cpu", "executor": executor,
            "models": [mlp_entry(tmp_path, "small", 2), mlp_entry(tmp_path, "large", 3)]}


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_job_of_two_models_runs_as_one_schedule_and_writes_every_checkpoint(tmp_path, capsys):
    """Both models' modules on one Ray executor: each model gets its own checkpoint (loading back into a
    fresh model of its own size) and its own report, naming only its modules."""
    import ray

    executor = {"type": "ray", "max_actors": 2, "cpus_per_actor": 0, "warm_up": "off", "task_timeout_s": 600}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,   # this test's own Ray
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        code = main(["tune", str(write(tmp_path / "job.yaml", two_models(tmp_path, executor)))])
    finally:
        ray.shutdown()
    printed = capsys.readouterr().out
    assert code == 0, printed
    from examples.mlp.model import make_data, make_model

    for name, blocks in (("small", 2), ("large", 3)):
        loaded = ait.load(ait.Module(make_model(blocks=blocks, width=16), name="mlp"), tmp_path / f"{name}.ait")
        x = make_data(batch_sizes=[4], per_batch_size=1, width=16)[0]
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), make_model(blocks=blocks, width=16)(x))
        run = json.loads((tmp_path / f"{name}.json").read_text())
        assert [m["module"] for m in run["report"]["modules"]] == [f"{name}.mlp"]
        assert run["checkpoint_check"]["passed"]
        assert {e["module"] for e in run["events"]} == {f"{name}.mlp"}
    assert "small: checkpoint:" in printed and "large: checkpoint:" in printed


def test_a_bad_key_in_the_second_model_is_refused_before_any_build(tmp_path, capsys, monkeypatch):
    import aitune_ray.command.cli as cli

    def never(*args, **kwargs):
        raise AssertionError("an executor was made for a job that should have been refused")

    monkeypatch.setattr(cli, "make_executor", never)
    data = two_models(tmp_path, {"type": "ray"})
    data["models"][1]["strategy"]["min_speedup_ratio"] = "fast"
    assert main(["tune", str(write(tmp_path / "job.yaml", data))]) == 2
    err = capsys.readouterr().err
    assert "models[1].strategy.min_speedup_ratio: expected a number, got str" in err
    assert not list(tmp_path.glob("*.ait")) and not list(tmp_path.glob("*.run"))


@pytest.mark.parametrize("change, message", [
    (lambda d: d["models"][1].update(epochs=3), "models[1].epochs: unknown key"),
    (lambda d: d["models"][0].update(executor={"type": "inline"}), "models[0].executor: set once at the top"),
    (lambda d: d.update(model="examples.mlp.model:make_model"), "model: a job with models sets it in each entry"),
    (lambda d: d["models"][1].pop("data"), "models[1].data: required key is missing"),
    (lambda d: d["models"][1].update(name="small"), "models[1].name: 'small' is used twice"),
    (lambda d: d["models"][1].update(output=d["models"][0]["output"]), "models[1].output: "),
    (lambda d: d["models"][1]["backends"][0].update(type="NoBackend"), "models[1].backends[0].type: unknown"),
    (lambda d: d.update(models=[]), "models: expected a non-empty list"),
    (lambda d: d["executor"].update(gpu_kind=" "), "executor.gpu_kind: the kind is empty"),
])
def test_every_model_is_checked_and_errors_name_the_model(tmp_path, change, message):
    data = two_models(tmp_path, {"type": "ray"})
    change(data)
    with pytest.raises(ConfigError) as info:
        load_jobs(write(tmp_path / "job.yaml", data))
    assert message in str(info.value)


def test_models_share_the_executor_and_default_their_outputs_to_their_names(tmp_path):
    data = two_models(tmp_path, {"type": "ray", "gpu_kind": "H100", "max_actors": 4})
    for entry in data["models"]:
        del entry["output"], entry["report"]
    jobs = load_jobs(write(tmp_path / "pair.yaml", data))
    assert [(j.name, j.output) for j in jobs] == [("small", "pair.small.ait"), ("large", "pair.large.ait")]
    assert all(j.executor.gpu_kind == "H100" and j.executor.max_actors == 4 and j.device == "cpu" for j in jobs)


def test_a_job_for_several_gpu_kinds_is_one_job_per_kind_with_the_kind_in_its_names(tmp_path):
    data = two_models(tmp_path, {"type": "ray", "gpu_kinds": ["H100", "A100"]})
    jobs = load_jobs(write(tmp_path / "pair.yaml", data))
    assert [(j.name, j.executor.gpu_kind, Path(j.output).name, Path(j.report).name) for j in jobs] == [
        ("small.H100", "H100", "small.H100.ait", "small.H100.md"), ("large.H100", "H100", "large.H100.ait",
                                                                    "large.H100.md"),
        ("small.A100", "A100", "small.A100.ait", "small.A100.md"), ("large.A100", "A100", "large.A100.ait",
                                                                    "large.A100.md")]
    assert all(j.executor.gpu_kinds is None for j in jobs)
    for executor, message in (({"gpu_kind": "H100", "gpu_kinds": ["A100"]}, "not both"),
                              ({"gpu_kinds": ["H100", "H100"]}, r"gpu_kinds\[1\]: 'H100' is listed twice"),
                              ({"gpu_kinds": []}, "the list is empty")):
        with pytest.raises(ConfigError, match=message):
            load_jobs(write(tmp_path / "bad.yaml", two_models(tmp_path, {"type": "ray", **executor})))


def test_each_gpu_kind_gets_its_own_decision_and_checkpoint_recording_that_kind(tmp_path, capsys):
    """One model for two kinds (custom labels of this test's one node, whose 2 fake GPUs both carry them): two
    runs, each on a pool of its kind, each writing its own checkpoint, which records that kind and loads."""
    import ray

    from aitune_ray.checkpoint.inspection import inspect_checkpoint

    entry = mlp_entry(tmp_path, "small", 2)
    del entry["name"]
    job = {**entry, "device": "cpu", "executor": {"type": "ray", "gpu_kinds": ["H100", "A100"], "max_actors": 1,
                                                  "cpus_per_actor": 0, "warm_up": "off", "task_timeout_s": 600}}
    ray.init(address="local", num_cpus=2, num_gpus=2, resources={"H100": 1, "A100": 1}, include_dashboard=False,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        code = main(["tune", str(write(tmp_path / "job.yaml", job))])
    finally:
        ray.shutdown()
    printed = capsys.readouterr().out
    assert code == 0, printed
    from examples.mlp.model import make_data, make_model

    for kind in ("H100", "A100"):
        path = tmp_path / f"small.{kind}.ait"
        (module,) = inspect_checkpoint(path)["modules"]
        assert module["gpu_kind"] == kind
        loaded = ait.load(ait.Module(make_model(blocks=2, width=16), name="mlp"), path)
        x = make_data(batch_sizes=[4], per_batch_size=1, width=16)[0]
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), make_model(blocks=2, width=16)(x))
        run = json.loads((tmp_path / f"small.{kind}.json").read_text())
        assert run["checkpoint_check"]["passed"]


def gated_entry(tmp_path: Path, name: str, tags: tuple[int, int]) -> dict:
    return {"name": name, "model": "tests.resume_job:make_model", "data": "tests.resume_job:make_data",
            "modules": [{"path": "", "name": "net"}],
            "strategy": {"type": "MaxThroughput", "measure": FAST_MEASURE, "deploy_check_rounds": 0},
            "backends": [{"type": "tests.fault_helpers:GatedBackend", "config": {"tag": t}} for t in tags],
            "output": str(tmp_path / f"{name}.ait"), "report": str(tmp_path / f"{name}.md")}


def test_a_killed_job_of_two_models_resumes_running_only_what_is_missing(tmp_path, monkeypatch, capsys):
    """The driver is killed while the second model's second candidate builds: the resumed job builds that one
    alone (the first model's results and the rest of the second's come from their run folders)."""
    from tests.test_resume import builds, kill_when_blocked

    # builds in the driver's own process, whose output says when the build of tag 4 has started
    job = write(tmp_path / "job.yaml", {"device": "cpu",
                                        "executor": {"type": "inline", "remeasure_rounds": 3, "contain": False},
                                        "models": [gated_entry(tmp_path, "first", (1, 2)),
                                                   gated_entry(tmp_path, "second", (3, 4))]})
    log = tmp_path / "builds.log"
    kill_when_blocked([sys.executable, "-m", "aitune_ray.command.cli", "tune", str(job)], log, 4)
    assert builds(log) == [1, 2, 3, 4] and not list(tmp_path.glob("*.ait"))
    monkeypatch.setenv("AITUNE_TEST_BUILD_LOG", str(log))
    monkeypatch.chdir(REPO)
    assert main(["tune", str(job), "--resume"]) == 0, capsys.readouterr().out
    assert builds(log)[4:] == [4]                          # only the build the kill interrupted (restores aside)
    for name, tags in (("first", {1, 2}), ("second", {3, 4})):
        run = json.loads((tmp_path / f"{name}.json").read_text())
        assert {r["spec"]["config"]["tag"] for r in run["report"]["modules"][0]["results"]} == tags
        assert (tmp_path / f"{name}.ait").is_file() and run["checkpoint_check"]["passed"]
