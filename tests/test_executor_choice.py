"""The default executor: Ray where it builds in parallel (GPUs here, or a cluster), inline where a local Ray
would run one candidate at a time (no GPU), and the reason said in one line by the command."""

from __future__ import annotations

import pytest

from aitune_ray.command.cli import make_executor
from aitune_ray.executors.choice import choose_executor
from aitune_ray.executors.inline import InlineExecutor
from aitune_ray.command.job import parse_job
from aitune_ray.api.tuning import default_executor


@pytest.mark.parametrize("requested, address, device, environ, ray, gpus, kind, says", [
    (None, None, None, {}, True, 0, "inline", "this machine has no GPU"),
    ("auto", None, "auto", {}, True, 2, "ray", "2 GPU(s)"),
    ("auto", None, "cpu", {}, True, 2, "inline", "tunes for the CPU"),
    ("auto", None, None, {"RAY_ADDRESS": "http://head:8265"}, True, 0, "ray", "http://head:8265"),
    ("auto", "ray://head:10001", None, {}, True, 0, "ray", "ray://head:10001"),
    ("ray", None, None, {}, True, 0, "ray", "the job asks for it"),
    ("inline", None, None, {}, True, 4, "inline", "the job asks for it"),
    ("auto", None, None, {}, False, 4, "inline", "Ray is not installed"),
    ("auto", None, None, {"AITUNE_RAY_EXECUTOR": "inline"}, True, 4, "inline", "AITUNE_RAY_EXECUTOR=inline"),
    ("ray", None, None, {"AITUNE_RAY_EXECUTOR": "inline"}, True, 0, "ray", "the job asks for it"),
])
def test_the_choice_and_its_reason(requested, address, device, environ, ray, gpus, kind, says):
    choice = choose_executor(requested, address, device, environ=environ, ray_installed=ray, gpus=gpus)
    assert choice.kind == kind and says in choice.reason
    assert choice.line().startswith(f"executor: {kind} (") and "\n" not in choice.line()


def test_a_job_without_an_executor_runs_inline_on_this_cpu_machine_and_says_why(monkeypatch, capsys):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("AITUNE_RAY_EXECUTOR", raising=False)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    job = parse_job({"model": "examples.mlp.model:make_model", "data": "examples.mlp.model:make_data"})
    assert job.executor.type == "auto"
    executor = make_executor(job)
    assert isinstance(executor, InlineExecutor) and job.executor.type == "inline"   # recorded in the report's job
    (line,) = [l for l in capsys.readouterr().out.splitlines() if l.startswith("executor:")]
    assert "this machine has no GPU" in line
    assert isinstance(default_executor("cpu"), InlineExecutor)
