"""The kernel plan's profile in a child process of a Ray driver (aitune_ray.cluster.profile_process): what comes
back equals a profile made here, a class of the caller's own script travels, a failure in the child names the
child's words, and the Ray runner sends a CUDA trace there, falling back to this process when it cannot."""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytest.importorskip("ray")

from aitune_ray.cluster import forge as forge_module  # noqa: E402
from aitune_ray.cluster.forge import RayForgeRunner  # noqa: E402
from aitune_ray.cluster.profile_process import ProfileChild, ProfileProcessError, profile_in_child  # noqa: E402
from aitune_ray.kernel_forge import KernelOptimizer  # noqa: E402
from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler  # noqa: E402
from aitune_ray.measure.conditions import cupti_attached  # noqa: E402
from aitune_ray.model.samples import tensors_of  # noqa: E402
from tests.forge_helpers import ForgeBlock, TestGeluProvider, block_samples  # noqa: E402

FUNCTIONS = {"gelu", "layer_norm", "scaled_dot_product_attention", "linear"}


def _same_samples(here: dict, there: dict) -> None:
    assert set(here) == set(there)
    for name in here:
        assert [count for count, _ in here[name]] == [count for count, _ in there[name]], name
        for (_, a), (_, b) in zip(here[name], there[name]):
            ta, tb = tensors_of(a), tensors_of(b)
            assert len(ta) == len(tb) and ta, name
            for x, y in zip(ta, tb):
                assert x.device == y.device and x.dtype == y.dtype and x.stride() == y.stride(), name
                assert torch.equal(x, y), name
            assert [v for v in a.kwargs.values() if not isinstance(v, torch.Tensor)] == \
                   [v for v in b.kwargs.values() if not isinstance(v, torch.Tensor)], name


def test_a_profile_in_a_child_process_gives_what_one_here_gives():
    model = ForgeBlock().eval()
    data = block_samples((2, 3))
    profiler = ModuleFunctionKernelProfiler(FUNCTIONS)
    here_frame, here_data = profiler.profile(model, data, module=model, warmup_iterations=0)
    frame, function_data = profile_in_child(ModuleFunctionKernelProfiler(FUNCTIONS), model, data, model, 0)

    assert list(frame.columns) == list(here_frame.columns)
    key = ["module_name", "function_name", "op"]
    assert sorted(map(tuple, frame[key].values.tolist())) == sorted(map(tuple, here_frame[key].values.tolist()))
    submodules = dict(model.named_modules())
    assert all(row.module is submodules[row.module_name] for row in frame.itertuples())  # this process's own
    assert (frame["kernel_us"] >= 0).all()
    _same_samples(here_data, function_data)
    assert {"gelu", "scaled_dot_product_attention", "layer_norm"} <= set(function_data)


def test_a_class_of_the_callers_own_script_travels_by_value():
    """A module class the child cannot import (defined in a function here, as in a user's script) still
    profiles there: cloudpickle sends it by value."""

    class ScriptOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return F.gelu(self.fc(x), approximate="tanh")

    model = ScriptOnly().eval()
    frame, data = profile_in_child(ModuleFunctionKernelProfiler({"gelu"}), model,
                                   [((torch.randn(4, 8),), {})], model, 1)
    assert set(frame["function_name"]) >= {"gelu"} and set(data) == {"gelu"}
    (count, sample), = data["gelu"]
    assert count == 1 and sample.kwargs == {"approximate": "tanh"} and tuple(sample.args[0].shape) == (4, 8)


class _FailsElsewhere(nn.Module):
    """Runs in the process that made it, and raises in any other."""

    def __init__(self):
        super().__init__()
        self.home = os.getpid()

    def forward(self, x):
        if os.getpid() != self.home:
            raise RuntimeError("no such layer over there")
        return F.gelu(x)


def test_a_child_that_fails_is_an_error_with_the_childs_last_words():
    model = _FailsElsewhere()
    with pytest.raises(ProfileProcessError, match="no such layer over there"):
        profile_in_child(ModuleFunctionKernelProfiler({"gelu"}), model, [torch.randn(2, 4)], model, 0)


def test_what_cannot_be_pickled_is_an_error_naming_it():
    model = ForgeBlock().eval()
    model.guard = _Unpicklable()
    with pytest.raises(ProfileProcessError, match="cannot be sent to a child process"):
        profile_in_child(ModuleFunctionKernelProfiler(FUNCTIONS), model, block_samples((2,)), model, 0)


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("this object stays where it is")


def _searched(runner, model, data):
    optimizer = KernelOptimizer([TestGeluProvider()], runner=runner, warmup_iterations=0)
    return optimizer.profile_functions(model, data, module=model)


def test_the_ray_runner_sends_a_cuda_trace_to_a_child_process(monkeypatch):
    """On a Ray driver a CUDA trace is made in a child process (here the trace is the CPU's: only the runner's
    check is told it is CUDA), and the plan's searches come from what the child sent back."""
    sent = []

    def recording(*args, **kwargs):
        frame, function_data = profile_in_child(*args, **kwargs)
        sent.append(function_data)
        return frame, function_data

    monkeypatch.setattr(forge_module, "uses_cuda", lambda module, data: True)
    monkeypatch.setattr(forge_module, "profile_in_child", recording)
    model, data = ForgeBlock().eval(), block_samples((2,))
    profiled = _searched(RayForgeRunner(executor=None), model, data)
    assert len(sent) == 1   # the child returned, so nothing fell back to this process
    assert profiled.provider_functions == ["gelu"]
    search = profiled.searches["gelu"]
    assert search.data is sent[0]["gelu"]   # the searched samples are the ones the child sent back
    assert search.references and len(search.references) == len(search.data) == 1


def test_the_ray_runner_profiles_here_when_the_child_cannot(monkeypatch, caplog):
    """An unpicklable module: the runner says why, and profiles in this process as before."""
    monkeypatch.setattr(forge_module, "uses_cuda", lambda module, data: True)
    model = ForgeBlock().eval()
    model.guard = _Unpicklable()
    with caplog.at_level(logging.WARNING, logger="aitune_ray.cluster.forge"):
        profiled = _searched(RayForgeRunner(executor=None), model, block_samples((2,)))
    assert profiled.provider_functions == ["gelu"]
    assert "cannot be sent to a child process" in caplog.text and "profiling in this process instead" in caplog.text


def test_a_cpu_trace_on_a_ray_driver_stays_in_this_process(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a CPU trace needs no child process")

    monkeypatch.setattr(forge_module, "profile_in_child", never)
    profiled = _searched(RayForgeRunner(executor=None), ForgeBlock().eval(), block_samples((2,)))
    assert profiled.provider_functions == ["gelu"]


def test_a_child_started_ahead_waits_for_its_job_and_one_never_used_is_ended():
    """PlanRun starts the child before the driver needs it: it gets ready and waits for its job; closed unused,
    it is ended and its folder removed."""
    model, data = ForgeBlock().eval(), block_samples((2,))
    ahead = ProfileChild("cpu")
    unused = ProfileChild("cpu")
    try:
        frame, function_data = ahead.profile(ModuleFunctionKernelProfiler(FUNCTIONS), model, data, model, 0)
        assert ahead.proc.returncode == 0 and "gelu" in function_data and len(frame)
        assert unused.proc.poll() is None   # still waiting for a job
    finally:
        ahead.close()
        unused.close()
    assert unused.proc is None and not os.path.exists(unused.folder) and not os.path.exists(ahead.folder)


def test_a_child_dropped_without_close_is_ended_all_the_same():
    import gc

    child = ProfileChild("cpu")
    proc, folder = child.proc, child.folder
    del child
    gc.collect()
    assert proc.returncode is not None and not os.path.exists(folder)


def test_the_ray_runner_uses_the_child_it_was_given_once(monkeypatch):
    monkeypatch.setattr(forge_module, "uses_cuda", lambda module, data: True)
    monkeypatch.setattr(forge_module, "profile_in_child", lambda *a, **k: pytest.fail("the given child goes first"))
    child = ProfileChild("cpu")
    runner = RayForgeRunner(executor=None, profile_child=child)
    profiled = _searched(runner, ForgeBlock().eval(), block_samples((2,)))
    assert profiled.provider_functions == ["gelu"]
    assert runner.profile_child is None and child.proc is None and not os.path.exists(child.folder)


# ----- GPU (device machine) ------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_cuda_profile_in_a_child_gives_cuda_samples_and_leaves_the_module_and_no_cupti_here():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gen = torch.Generator().manual_seed(0)
    model = ForgeBlock(dim=64, heads=4).cuda().half().eval()
    x = torch.randn(2, 256, 64, generator=gen).cuda().half()
    weights = {name: p.detach().clone() for name, p in model.state_dict().items()}
    frame, data = profile_in_child(ModuleFunctionKernelProfiler({"scaled_dot_product_attention", "gelu"}), model,
                                   [((x,), {})], model, 1)
    assert not cupti_attached()
    assert (frame["kernel_us"] > 0).any() and "scaled_dot_product_attention" in set(frame["function_name"])
    (count, sample), = data["scaled_dot_product_attention"]
    assert count == 1 and all(t.is_cuda for t in tensors_of(sample)) and sample.args[0].dtype == torch.half
    assert all(torch.equal(weights[name], p) for name, p in model.state_dict().items())
    out = model(x)   # this process's tensors are still its own after the child has gone
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
