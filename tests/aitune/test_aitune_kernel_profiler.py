"""AITune 0.6.0's unit tests of ModuleFunctionKernelProfiler (tests/unit/torch/backend/kernels/
test_module_function_kernel_profiler.py), ported: its CPU tests of the public methods, the same assertions,
`aitune.torch` read as `aitune_ray`. Its CUDA tests and its tests of private helpers (`_nearest_parent_label`,
`_ProfilingItem`, `_SummaryItem`, `_rewrite_func_data`) are not ported (tests/test_kernel_forge.py covers the
profiler here)."""

import pytest
from torch import nn

from aitune_ray.kernel_forge.module_function_kernel_profiler import ModuleFunctionKernelProfiler


def test_get_functions_to_patch():
    names = [name for name, _ in ModuleFunctionKernelProfiler().get_functions_to_patch()]
    assert len(names) > 1 and "linear" in names
    names = [name for name, _ in ModuleFunctionKernelProfiler(function_names={"linear"}).get_functions_to_patch()]
    assert "linear" in names and "relu" in names


def test_profile_requires_module_scope_for_non_module_function():
    with pytest.raises(ValueError, match="module must be provided"):
        ModuleFunctionKernelProfiler().profile(lambda: None)


def test_profile_rejects_negative_warmup_iterations():
    with pytest.raises(ValueError, match="warmup_iterations must be greater than or equal to 0"):
        ModuleFunctionKernelProfiler().profile(nn.Identity(), warmup_iterations=-1)
