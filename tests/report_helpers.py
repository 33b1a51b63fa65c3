"""A quick real job (inline, CPU) whose report files the report and browser tests read."""

from __future__ import annotations

from pathlib import Path

import yaml

from aitune_ray.command.cli import main

REPO = Path(__file__).resolve().parents[1]
FAST = {"warmup_runs": 1, "min_runs": 3, "max_runs": 10, "max_seconds": 0.05}


def quick_job(tmp_path: Path) -> Path:
    """The mlp example with eager and a backend that fails to build, MaxThroughput, inline, quick."""
    data = yaml.safe_load((REPO / "examples" / "mlp" / "job.yaml").read_text())
    data.update(backends=[{"type": "TorchEagerBackend"}, {"type": "tests.ray_helpers:RaisingBackend"}],
                executor={"type": "inline"}, device="cpu", output=str(tmp_path / "mlp.ait"),
                report=str(tmp_path / "report" / "mlp.md"))
    data["strategy"] = {"type": "MaxThroughput", "performance_validation": False, "measure": FAST}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_quick_job(tmp_path: Path) -> Path:
    """Run quick_job; returns the Markdown report's path."""
    code = main(["tune", str(quick_job(tmp_path))])
    assert code == 0
    return tmp_path / "report" / "mlp.md"
