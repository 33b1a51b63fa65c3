"""On a GPU: doctor says this machine tunes for CUDA, and a Ray job's report draws its schedule with one row
per GPU actor. Skipped without CUDA.

    AITUNE_RAY_GPU_OUT=OUT python -m pytest -q -s -m gpu tests/test_gpu_report.py   (the files are kept in OUT)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

from aitune_ray.executors import doctor
from aitune_ray.command.cli import main

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[1]


def keep(path: Path) -> None:
    """Copy a result file to $AITUNE_RAY_GPU_OUT (when set) for the record."""
    out = os.environ.get("AITUNE_RAY_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)


def test_doctor_on_a_gpu(capsys):
    row = doctor.machine_report()
    assert row["cuda_available"] and row["target"] == "cuda" and row["gpus"]
    assert row["gpus"][0]["memory_gib"] > 1 and row["driver"]
    assert {"TorchEagerBackend", "TorchInductorJitBackend"} <= set(row["runnable"])
    sdpa = {p["name"]: p["devices"] for p in row["providers"] if p["name"].startswith("TorchSDPA")}
    assert sdpa["TorchSDPA (flash)"] == ["cuda", "cpu"] and sdpa["TorchSDPA (cuDNN, efficient)"] == ["cuda"]
    assert main(["doctor"]) == 0
    printed = capsys.readouterr().out
    print(printed)
    assert f"{row['node']}: tunes for cuda; can run: " in printed


def test_ray_job_report_draws_one_row_per_gpu_actor(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AITUNE_RAY_EXECUTOR", raising=False)
    report = tmp_path / "attention.md"
    code = main(["tune", "examples/attention/job.yaml", "--executor", "ray", "--output", str(tmp_path / "a.ait"),
                 "--report", str(report)])
    printed = capsys.readouterr().out
    assert code == 0, printed[-4000:]
    run = json.loads(report.with_suffix(".json").read_text())
    gpus = {e.get("gpu") for e in run["events"] if e.get("gpu")}
    assert gpus and all("cpu" not in g for g in gpus), gpus
    with Image.open(tmp_path / "attention-timeline.png") as image:
        assert image.size[0] >= 600
    html = report.with_suffix(".html").read_text()
    assert "kernel plan of KernelSelectorBackend" in html and 'id="timeline"' in html
    for name in ("attention.md", "attention.html", "attention.json", "attention-timeline.png",
                 "attention-speedup.png"):
        keep(tmp_path / name)
    assert main(["inspect", str(tmp_path / "a.ait")]) == 0
    print(capsys.readouterr().out)
