"""A job file cannot stall or swamp the command before it prints anything: YAML aliases that expand past
100 000 values are refused (nested aliases expand a few hundred bytes into billions of nodes), and so is a file over 1 MiB. Each is a one-line
error and exit code 2, quickly; the command runs in a child process under a timeout, so that a regression
fails the test instead of hanging it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aitune_ray.command.cli import EXIT_BAD_JOB
from aitune_ray.command.job import MAX_JOB_BYTES

REPO = Path(__file__).resolve().parents[1]


def billion_laughs() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def run_command(job: Path, timeout_s: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "aitune_ray", "tune", str(job)], cwd=job.parent, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def test_nested_yaml_aliases_are_refused_at_once(tmp_path):
    job = tmp_path / "laughs.yaml"
    job.write_text(billion_laughs())
    assert len(job.read_bytes()) < 700
    done = run_command(job)   # a regression expands 9**10 strings: the timeout fails the test
    assert done.returncode == EXIT_BAD_JOB
    assert "YAML aliases" in one_error_line(done.stderr) and "expand to more than" in done.stderr


def test_aliases_that_expand_to_a_few_values_are_read_and_a_recursive_one_is_refused(tmp_path):
    from aitune_ray.command.job import parse_yaml
    from aitune_ray.errors import ConfigError

    shared = "backend: &b {type: TorchInductorJitBackend}\nbackends: [*b, *b]\n"
    assert parse_yaml(shared, "job.yaml")["backends"] == [{"type": "TorchInductorJitBackend"}] * 2
    with pytest.raises(ConfigError, match="never ends"):
        parse_yaml("a: &x [1, *x]\n", "job.yaml")


def test_a_job_file_over_the_limit_is_refused_unread(tmp_path):
    job = tmp_path / "big.yaml"
    with open(job, "w") as out:
        out.write("device: cpu\n")
        out.write("# " + "x" * (MAX_JOB_BYTES + 10) + "\n")
    done = run_command(job)
    assert done.returncode == EXIT_BAD_JOB
    assert "larger than 1 MiB" in one_error_line(done.stderr)
