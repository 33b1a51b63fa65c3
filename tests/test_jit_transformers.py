"""AITune's JIT quick start with the first import changed (examples/jit/quickstart.py) on a tiny BERT on the CPU:
the first call records and starts tuning, calls run eagerly until the verdict, later calls run on the chosen
backend and match eager; the next run starts tuned from the cache, building nothing. ONNX Runtime only (the
cheapest real backend here), builds contained in a child process (the JIT default on a machine without Ray)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import aitune_ray as ait
from aitune_ray.jit import registry
from aitune_ray.jit.patched import ModuleState
from aitune_ray.jit.patcher import Patcher, jit_reset
from aitune_ray.jit.tune import wait
from aitune_ray.measure.timing import MeasureConfig
from tests.jit_helpers import jit_tuning, one_backend, run_example

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None
                                or importlib.util.find_spec("onnxruntime") is None,
                                reason="needs transformers and onnxruntime")


@pytest.fixture
def jit(tmp_path):
    measure = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_seconds=0.1, latency_runs=0)
    with jit_tuning(one_backend(ait.backend.ONNXRuntimeBackend(), measure), ait.InlineExecutor(0, contain=True),
                    tmp_path / "cache") as config:
        yield config


def test_the_jit_quick_start_tunes_a_transformers_model_and_the_next_run_starts_tuned(jit):
    done = run_example("quickstart")
    model, inputs, first = done["model"], done["inputs"], done["first"]
    (head,) = registry.heads
    assert head.__wrapped__ is model and head.samples.calls_seen >= 1
    assert wait(600)
    with torch.no_grad():
        tuned = model(**inputs)
    assert head.state is ModuleState.TUNED, head.info
    assert type(head.backend).__name__ == "ONNXRuntimeBackend"
    assert type(tuned).__name__ == "SequenceClassifierOutput"
    torch.testing.assert_close(tuned.logits, first.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(done["second"].logits, first.logits, atol=1e-4, rtol=1e-4)
    assert Patcher.tuner.builds == 1

    jit_reset()                                      # the next run of the script
    again = run_example("quickstart")
    (head,) = registry.heads
    assert head.state is ModuleState.TUNED and head.info.startswith("cached")
    assert head.switched_at_call == 1 and Patcher.tuner.builds == 0
    torch.testing.assert_close(again["first"].logits, first.logits, atol=1e-4, rtol=1e-4)
