"""Every example: a README, a job file and a script; each job file passes the schema; each example's
CPU-sized job runs through the command and its script runs as a script, and their checkpoints load back."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aitune_ray.command.cli import main
from aitune_ray.command.job import load_job

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
#: example -> (its script, the script's CPU arguments, the CPU-sized job file, a library it needs).
CASES = {
    "attention": ("examples/attention_quickstart.py", [], "examples/attention/job_cpu.yaml", None),
    "bert": ("examples/bert/run.py", ["--size", "tiny", "--executor", "inline"], "examples/bert/job_tiny.yaml", None),
    "pipeline": ("examples/pipeline/run.py", ["--executor", "inline", "--eager-only"], "examples/pipeline/job.yaml", None),
    "vit": ("examples/vit/run.py", ["--size", "tiny", "--executor", "inline"], "examples/vit/job_cpu.yaml", None),
    "hf_encoder": ("examples/hf_encoder/run.py", ["--size", "tiny", "--executor", "inline"],
                   "examples/hf_encoder/job_tiny.yaml", "transformers"),
}
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def needs(library):
    if library and importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed (pip install 'aitune-ray[{library}]')")


def test_every_example_has_a_readme_a_job_and_a_script():
    for name, (script, _, job, _) in CASES.items():
        folder = EXAMPLES / name
        assert (folder / "README.md").exists() and (REPO / script).exists() and (REPO / job).exists(), name
        text = (folder / "README.md").read_text()
        assert "aitune-ray tune" in text and "ray job submit" in text and f"python {script}" in text, name
    listed = {p.parent.name for p in EXAMPLES.glob("*/README.md")}
    assert set(CASES) <= listed


@pytest.mark.parametrize("job", sorted(str(p.relative_to(REPO)) for p in EXAMPLES.glob("*/job*.yaml")))
def test_job_files_pass_the_schema(job):
    if "hf_encoder" in job:
        needs("transformers")
    loaded = load_job(REPO / job)
    assert loaded.report and loaded.output


@pytest.mark.slow
@pytest.mark.parametrize("name", ["attention", "pipeline", "hf_encoder"])   # bert: tests/test_examples_bert.py
def test_cpu_job_runs_through_the_command(name, tmp_path, monkeypatch, capsys):
    _, _, job, library = CASES[name]
    needs(library)
    monkeypatch.chdir(REPO)
    code = main(["tune", job, "--executor", "inline", "--device", "cpu", "--output", str(tmp_path / "x.ait"),
                 "--report", str(tmp_path / "x.md")])
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    assert "(matches)" in printed
    run = json.loads((tmp_path / "x.json").read_text())
    assert run["checkpoint_check"]["passed"] and run["events"]
    assert (tmp_path / "x.html").exists() and (tmp_path / "x-timeline.png").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_script_runs_on_cpu(name, tmp_path):
    script, args, _, library = CASES[name]
    needs(library)
    out = [] if name == "attention" else ["--out", str(tmp_path / "x.ait")]
    env = dict(os.environ, PYTHONPATH="", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(REPO / script), *args, *out], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Decision:" in done.stdout
    expect = "relative L2 error after load: 0" if name == "attention" else "max abs difference after load 0"
    assert expect in done.stdout, done.stdout[-3000:]


@pytest.mark.slow
def test_the_transformers_script_tunes_gpt2_called_with_keywords(tmp_path):
    """examples/transformers/run.py on the CPU: GPT-2 called with use_cache=False keeps its ModelOutput, tuned and
    after a checkpoint round trip."""
    needs("transformers")
    env = dict(os.environ, PYTHONPATH="", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(REPO / "examples/transformers/run.py"), "--size", "tiny", "--executor",
                           "inline", "--out", str(tmp_path / "x.ait")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "output: CausalLMOutputWithCrossAttentions with ['logits']" in done.stdout, done.stdout[-3000:]
    assert "max abs difference after load 0" in done.stdout, done.stdout[-3000:]
