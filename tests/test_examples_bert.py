"""The BERT example: its job files pass the schema, and the tiny model tunes inline and loads back (CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import aitune_ray as ait
from aitune_ray.command.cli import main
from aitune_ray.command.job import load_job, parse_job

REPO = Path(__file__).resolve().parents[1]
BERT = REPO / "examples" / "bert"


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def test_model_sizes_and_mask():
    from examples.bert.model import make_data, make_model

    base = make_model("base")
    assert len(base.layers) == 12 and base.layers[0].qkv.in_features == 768
    assert base.layers[0].heads == 12 and base.layers[0].up.out_features == 3072
    assert all(item["input_ids"].shape[1] == 128 for item in make_data("base"))
    model, items = make_model("tiny"), make_data("tiny", batch_sizes=(2, 4))
    assert [tuple(i["input_ids"].shape) for i in items] == [(2, 16), (2, 16), (4, 16), (4, 16)]
    assert all(i["input_ids"].dtype == torch.long for i in items)
    assert torch.equal(make_data("tiny")[0]["input_ids"], make_data("tiny")[0]["input_ids"])  # seeded
    # Padded positions are masked out: changing their ids leaves the others' outputs alone.
    item = items[0]
    mask = item["attention_mask"].bool()
    assert not mask.all()
    changed = item["input_ids"].masked_fill(~mask, 7)
    with torch.no_grad():
        a, b = model(**item), model(changed, item["attention_mask"])
    assert torch.allclose(a[mask], b[mask], atol=1e-5)
    assert torch.equal(make_model("tiny").layers[0].qkv.weight, model.layers[0].qkv.weight)  # seeded


def test_job_file_passes_the_schema():
    job = load_job(BERT / "job.yaml")
    types = [b.type for b in job.backends]
    assert job.strategy.type == "MaxThroughput" and len(types) >= 8
    assert {"TorchInductorJitBackend", "TorchInductorAotBackend", "TorchAOBackend", "ONNXRuntimeBackend",
            "KernelSelectorBackend"} <= set(types)
    modes = {b.config.get("mode") for b in job.backends if b.type == "TorchInductorJitBackend"}
    assert modes == {None, "max-autotune-no-cudagraphs", "reduce-overhead"}
    assert {b.config["quantization"] for b in job.backends if b.type == "TorchAOBackend"} == \
        {"int8wo", "int8dq", "fp8wo"}
    # The same job at test size still passes (model_args and data_args as an override would give them).
    data = yaml.safe_load((BERT / "job.yaml").read_text())
    data.update(model_args={"size": "tiny"}, data_args={"size": "tiny"}, device="cpu", executor={"type": "inline"})
    tiny = parse_job(data)
    assert len(tiny.make_strategy("cpu").backends) == len(types)
    assert tiny.make_model().layers[0].qkv.in_features == 64


def test_tiny_job_tunes_inline_and_loads_back(tmp_path, capsys):
    output = tmp_path / "bert.ait"
    assert main(["tune", str(BERT / "job_tiny.yaml"), "--output", str(output),
                 "--report", str(tmp_path / "bert.md")]) == 0
    printed = capsys.readouterr().out
    assert "ONNXRuntimeBackend" in printed and "checkpoint check" in printed and "(matches)" in printed

    from examples.bert.model import make_data, make_model

    loaded = ait.load(ait.Module(make_model("tiny"), "bert"), output, allow_native_code=True)  # may be AOTInductor
    eager = make_model("tiny")
    with torch.no_grad():
        for item in make_data("tiny", batch_sizes=(2, 8), per_batch_size=1):
            torch.testing.assert_close(loaded(**item), eager(**item), rtol=1e-4, atol=1e-4)
