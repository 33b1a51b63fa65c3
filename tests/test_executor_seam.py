"""The executor seam: optional capabilities are declared on Executor, and a wrapper passes every one on."""

from __future__ import annotations

import torch

from aitune_ray.worker.seam import Executor, TuneContext
from aitune_ray.executors.inline import InlineExecutor
from aitune_ray.records.results import OK, BuildResult
from aitune_ray.executors.run_dir import RunFolder, journaled
from aitune_ray.model.samples import SampleStore


class Recording(InlineExecutor):
    concurrent_modules = True
    gpu_kind = "H100"

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def release(self, context, result):
        self.calls.append(("release", result.key))

    def stop_all(self, reason):
        self.calls.append(("stop_all", reason))


def test_capabilities_are_declared_on_the_executor_with_their_defaults():
    assert (Executor.concurrent_modules, Executor.gpu_kind) == (False, None)
    assert InlineExecutor.concurrent_modules is False


def test_a_run_folder_s_journal_passes_every_capability_and_call_on(tmp_path):
    inner = Recording()
    wrapped = journaled(inner, RunFolder.open(tmp_path / "run"))
    assert (wrapped.concurrent_modules, wrapped.gpu_kind) == (True, "H100")
    context = TuneContext("m", torch.nn.Identity(), SampleStore([]), torch.device("cpu"), workdir=tmp_path)
    wrapped.release(context, BuildResult(key="k", backend="B", spec={}, status=OK))
    wrapped.stop_all("interrupted")
    assert inner.calls == [("release", "k"), ("stop_all", "interrupted")]
