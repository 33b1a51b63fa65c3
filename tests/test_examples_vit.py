"""The ViT example: its model has ViT-B/16's shape, its job files pass the schema, and the CPU-sized job
tunes inline, is checked after its checkpoint loads, and loads back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import aitune_ray as ait
from aitune_ray.command.cli import main
from aitune_ray.command.job import load_job

REPO = Path(__file__).resolve().parents[1]
VIT = REPO / "examples" / "vit"


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def test_base_model_is_vit_b16_sized_and_tiny_runs():
    from examples.vit.model import make_data, make_model

    base = make_model("base", dtype="float32")
    assert len(base.blocks) == 12 and base.blocks[0].qkv.in_features == 768 and base.blocks[0].heads == 12
    assert base.blocks[0].fc1.out_features == 3072 and base.position.shape == (1, 197, 768)
    assert sum(p.numel() for p in base.parameters()) == pytest.approx(85.8e6, rel=0.01)
    assert make_model("base").cls.dtype == torch.float16
    tiny, items = make_model("tiny", dtype="float32"), make_data("tiny", batch_sizes=(2, 8), dtype="float32")
    assert [tuple(x.shape) for x in items] == [(2, 3, 32, 32), (2, 3, 32, 32), (8, 3, 32, 32), (8, 3, 32, 32)]
    with torch.no_grad():
        assert tiny(items[0]).shape == (2, 17, 64)
    assert torch.equal(make_data("tiny")[0], make_data("tiny")[0])                          # seeded
    assert torch.equal(make_model("tiny").blocks[0].qkv.weight, make_model("tiny").blocks[0].qkv.weight)


def test_gpu_job_file_has_the_candidate_set():
    job = load_job(VIT / "job.yaml")
    assert job.model_args == {"size": "base", "dtype": "float16"} and job.data_args["batch_sizes"] == [8, 32]
    described = [(b.type, b.config.get("mode") or b.config.get("quantization")) for b in job.backends]
    assert described == [("TorchInductorJitBackend", None), ("TorchInductorJitBackend", "reduce-overhead"),
                         ("TorchInductorJitBackend", "max-autotune-no-cudagraphs"), ("TorchAOBackend", "fp8wo"),
                         ("KernelSelectorBackend", None)]


def test_cpu_job_tunes_inline_checks_the_loaded_module_and_loads_back(tmp_path, capsys):
    output = tmp_path / "vit.ait"
    assert main(["tune", str(VIT / "job_cpu.yaml"), "--output", str(output), "--report", str(tmp_path / "vit.md")]) == 0
    printed = capsys.readouterr().out
    assert "TorchAOBackend" in printed and "(matches)" in printed
    assert "quantized 8 of 8 layers" in printed               # 2 blocks of 4 Linear layers; the Conv2d stays
    if "kept eager" not in printed:                            # a chosen backend is timed again as loaded
        assert "post-deploy check of vit as loaded" in printed
    from examples.vit.model import make_data, make_model

    loaded = ait.load(ait.Module(make_model("tiny", dtype="float32"), "vit"), output)
    eager = make_model("tiny", dtype="float32")
    with torch.no_grad():
        for x in make_data("tiny", batch_sizes=(2, 8), per_batch_size=1, dtype="float32"):
            assert loaded(x).shape == eager(x).shape
