"""The docs: every Python block of the README, of docs/ and of the examples' READMEs runs on the CPU (blocks
marked `<!-- gpu -->` only where CUDA is), the README's quick start is examples/quickstart.py, its first
command is what CI runs, and the job-file reference (docs/job.md) is what the schema says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
READMES = [REPO / "README.md", *sorted((REPO / "examples").glob("*/README.md"))]
DOCS = READMES + sorted((REPO / "docs").glob("*.md"))
JOB_REFERENCE = REPO / "docs" / "job.md"
BLOCK = re.compile(r"(?P<mark><!--\s*gpu\s*-->\s*\n)?```python\n(?P<code>.*?)\n```", re.S)
NEEDS = {"examples/hf_encoder/README.md": "transformers", "examples/transformers/README.md": "transformers",
         "examples/diffusers/README.md": "diffusers"}


def python_blocks() -> list:
    params = []
    for doc in DOCS:
        name = doc.relative_to(REPO).as_posix()
        for index, match in enumerate(BLOCK.finditer(doc.read_text())):
            marks = []
            if match["mark"]:
                marks.append(pytest.mark.gpu)
            params.append(pytest.param(name, match["code"], id=f"{name}#{index}", marks=marks))
    return params


def test_ci_runs_the_readmes_first_command_as_written():
    """.ci/run runs the README's first command in a fresh copy of the repository: the same text, so that
    what a new user types first is what CI proves exits 0."""
    script = (REPO / ".ci" / "run").read_text()
    (command,) = re.findall(r"^FIRST_COMMAND='(.*)'$", script, re.M)
    first_block = re.search(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
    assert first_block is not None and first_block[1].strip() == command
    assert 'bash -c "$FIRST_COMMAND"' in script and "[test]" not in command


def test_every_readme_has_a_python_block():
    names = {p.values[0] for p in python_blocks()}
    assert names >= {d.relative_to(REPO).as_posix() for d in READMES}


def test_the_quick_start_is_examples_quickstart():
    """The README's quick-start block and examples/quickstart.py (below its docstring) are the same code."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    block = BLOCK.search(section)["code"]
    script = (REPO / "examples" / "quickstart.py").read_text()
    code = script.split('"""', 2)[2].strip("\n")
    assert block == code


@pytest.mark.parametrize("doc, code", python_blocks())
def test_python_block_runs(doc, code, tmp_path, monkeypatch):
    """Each block in a namespace of its own, in this process (already holding torch), in an empty folder."""
    needed = NEEDS.get(doc)
    if needed:
        pytest.importorskip(needed)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AITUNE_RAY_EXECUTOR", "inline")
    monkeypatch.syspath_prepend(str(REPO))
    try:
        exec(compile(code, f"{doc} (python block)", "exec"), {"__name__": "__doc_block__"})
    finally:   # a block that started Ray (an executor it made itself) leaves none behind
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


def test_the_job_file_reference_is_the_schemas():
    done = subprocess.run([sys.executable, str(REPO / "docs" / "job_reference.py"), "--check", str(JOB_REFERENCE)],
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_reference_follows_a_changed_schema(monkeypatch):
    """A key added to the schema shows up in the generated reference (so the check above would fail)."""
    import dataclasses

    sys.path.insert(0, str(REPO / "docs"))
    import job_reference

    from aitune_ray.command import job as schema

    @dataclasses.dataclass
    class Executor(schema.ExecutorSpec):
        spill_dir: str | None = None   # where spilled objects go

    readme = JOB_REFERENCE.read_text()
    assert job_reference.splice(readme, job_reference.reference()) == readme
    monkeypatch.setattr(schema.Job, "__annotations__", dict(schema.Job.__annotations__, executor=Executor))
    generated = job_reference.reference()
    assert "| `executor.spill_dir` | string or null | `null` | where spilled objects go |" in generated
    assert job_reference.splice(readme, generated) != readme
