"""The model zoo's CI subset (benchmarks/zoo.py, through its own code path): real models from transformers,
diffusers, timm and torchvision, built from configs with random weights and called as their users call them,
each tuned end to end on a backend: it builds, its output (type and every tensor) matches eager, and it
survives ait.save and ait.load into a freshly built model. About 2 minutes on 2 CPU cores; a model whose library
is not installed or cannot load here is skipped, saying why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import zoo  # noqa: E402

#: (model, backend): one transformers encoder with an attention mask, a decoder LM called with use_cache=False,
#: a diffusers UNet, a timm CNN and a torchvision model; every CPU backend at least once.
CASES = [
    ("bert", "aot"),
    ("bert", "kernels"),
    ("bert", "onnx"),
    ("gpt2", "jit"),
    ("gpt2", "onnx"),
    ("unet", "ao-int8wo"),
    ("timm-resnet", "jit"),
    ("tv-resnet18", "onnx"),
]


@pytest.mark.slow
@pytest.mark.parametrize("model, backend", CASES)
def test_a_real_model_tunes_end_to_end(model, backend, tmp_path):
    entry = zoo.MODELS[model]
    problem = zoo.library_problem(entry.library)
    if problem:
        pytest.skip(problem)
    row = zoo.run_one(entry, backend, workdir=tmp_path)
    assert row["build"] == "ok", row
    assert row["correct"], row
    assert row["round_trip"], row
    assert row["speedup"] is not None and row["speedup"] > 0, row


def test_the_output_check_sees_a_model_output_turned_into_a_dict():
    """check_outputs: the same tensors in a plain dict where eager returns a ModelOutput fail, naming both
    types; the same type passes; a tensor off by more than the tolerance fails."""
    from transformers.modeling_outputs import BaseModelOutput

    hidden = torch.randn(2, 4, 8)
    eager = BaseModelOutput(last_hidden_state=hidden)
    passed, why, _ = zoo.check_outputs({"last_hidden_state": hidden.clone()}, eager)
    assert not passed and "dict" in why and "BaseModelOutput" in why
    assert zoo.check_outputs(BaseModelOutput(last_hidden_state=hidden.clone()), eager)[0]
    passed, why, error = zoo.check_outputs(BaseModelOutput(last_hidden_state=hidden * 1.1), eager)
    assert not passed and error == pytest.approx(0.1, rel=1e-3)


def test_failures_are_classified_by_where_they_were_raised():
    assert zoo.classify("torch/onnx/_internal/exporter/_core.py:12", "x") == "library"
    assert zoo.classify("onnxruntime/capi/onnxruntime_inference_collection.py:3", "x") == "library"
    assert zoo.classify("aitune_ray/backend/onnx_runtime.py:40", "x") == "here"
    assert zoo.classify("", "wrong output") == "here"


def test_every_model_of_the_zoo_is_built_and_called_as_its_users_call_it():
    """Each model whose library is usable here builds from its config and runs eagerly on its own calls,
    returning what its library returns (a ModelOutput for transformers and diffusers models)."""
    runnable = [e for e in zoo.MODELS.values() if not zoo.library_problem(e.library)]
    if not runnable:
        pytest.skip("none of transformers, diffusers, timm and torchvision is usable here")
    for entry in runnable:
        model = zoo.make_model(entry, "tiny", torch.float32, "cpu")
        for item in zoo.make_calls(entry, "tiny", torch.float32, "cpu"):
            with torch.no_grad():
                out = model(**item)
            if entry.library in ("transformers", "diffusers") and entry.name != "vae-decoder":
                # transformers' ModelOutput and diffusers' BaseOutput are both ordered dicts
                assert isinstance(out, dict) and type(out) is not dict, (entry.name, type(out))
    assert len(zoo.MODELS) >= 20


def test_the_gpu_runs_zoo_parts_name_every_model_once():
    import re

    script = (REPO / "benchmarks" / "gpu_run.sh").read_text()
    named = [m for group in re.findall(r"zoo-\w+\) models=([\w,-]+)", script) for m in group.split(",")]
    assert sorted(named) == sorted(zoo.MODELS)


def test_an_error_traced_to_this_project_is_classified_here_wherever_it_was_raised():
    error = ("build failed: UserError: Detected mismatch between the structure of `inputs` and `dynamic_shapes`: "
             "`inputs[2]` is a <class 'dict'>")
    assert zoo.classify("torch/export/dynamic_shapes.py:668", error) == "here"
    assert "flat_call" in zoo.known(error)[1]


#: What faulthandler prints when a run is stopped at its limit: a compile worker's thread first, the run's own
#: thread (the one through zoo.py) after it.
_TIMEOUT_DUMP = """Timeout (0:01:10)!
Thread 0x00007f01 (most recent call first):
  File "/site-packages/torch/_inductor/compile_worker/timer.py", line 43 in check
  File "/usr/lib/python3.12/threading.py", line 1010 in run

Thread 0x00007f02 (most recent call first):
  File "/site-packages/torch/_inductor/codecache.py", line 900 in load
  File "/repo/aitune_ray/backend/torch_inductor_aot.py", line 120 in build
  File "/repo/benchmarks/zoo.py", line 800 in run_one
"""


def test_a_crashed_runs_stack_is_the_runs_own_thread():
    stack = zoo.crashed_stack(_TIMEOUT_DUMP)
    assert stack[0].startswith('File "/site-packages/torch/_inductor/codecache.py"')
    assert any("aitune_ray/backend/torch_inductor_aot.py" in line for line in stack)
    assert not any("timer.py" in line for line in stack)


def test_a_segfaults_stack_is_the_current_thread_without_the_runs_frames():
    dump = ("Fatal Python error: Segmentation fault\n\nThread 0x01 (most recent call first):\n"
            '  File "/x/tqdm/_monitor.py", line 69 in run\n\nCurrent thread 0x02 (most recent call first):\n'
            '  File "/x/torch/_inductor/cpp_builder.py", line 5 in run\n\nExtension modules: torch\n')
    assert zoo.crashed_stack(dump) == ['File "/x/torch/_inductor/cpp_builder.py", line 5 in run']


def test_combine_keeps_a_later_parts_row_for_the_same_model_and_backend(tmp_path):
    import json

    def part(name, rows, complete):
        data = {"size": "tiny", "device": "cpu", "dtype": "float32", "complete": complete, "rows": rows,
                "totals": zoo.totals(rows), "versions": {}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"benchmark": "zoo", "result": data}))
        return str(path)

    def row(model, backend, build):
        return {"model": model, "library": "transformers", "what": model, "backend": backend, "build": build,
                "failure": "" if build == "ok" else "here", "correct": build == "ok", "round_trip": build == "ok"}

    first = part("a", [row("bert", "aot", "error"), row("bert", "jit", "ok")], False)
    second = part("b", [row("bert", "aot", "ok")], False)
    assert zoo.combine([first, second], str(tmp_path / "zoo.md")) == 0
    record = json.loads((tmp_path / "zoo.json").read_text())["result"]
    assert [(r["backend"], r["build"]) for r in record["rows"]] == [("jit", "ok"), ("aot", "ok")]
    assert record["totals"]["failures_here"] == 0 and record["complete"] is False
