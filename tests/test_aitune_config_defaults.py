"""AITune's refusals and defaults: TorchAOBackendConfig takes a preset or a torchao config (one, not both, not
neither) and reads quantization_config back as the torchao object; Module's default name is AITune's
qualified class name with "/" replaced; the kernel profiler warms up 3 times; AITUNE_KERNEL_GENERATION_TIMEOUT
sets the generation timeout's default."""

import inspect
import os
import subprocess
import sys

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import TorchAOBackend, TorchAOBackendConfig
from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge import KernelOptimizer, ModuleFunctionKernelProfiler
from tests.helpers import SleepyAffine


def test_torchao_config_refuses_a_preset_with_a_config_and_neither():
    from torchao.quantization import Int8WeightOnlyConfig

    with pytest.raises(ValueError, match="not both"):
        TorchAOBackendConfig(quantization="int8wo", quantization_config=Int8WeightOnlyConfig())
    with pytest.raises(ConfigError, match="quantization= .*or quantization_config="):
        TorchAOBackendConfig()
    assert TorchAOBackend().config.quantization == "fp8wo"        # the backend's own default, as AITune's


def test_torchao_quantization_config_reads_back_as_the_torchao_object_and_travels_as_json():
    from torchao.quantization import Int8WeightOnlyConfig

    given = Int8WeightOnlyConfig()
    config = TorchAOBackendConfig(quantization_config=given, mode=None)
    assert config.quantization_config is given and config.quantization is None
    data = config.to_dict()
    assert isinstance(data["quantization_config"], dict)          # JSON: a checkpoint never pickles it
    again = TorchAOBackendConfig.from_dict(data)
    assert again == config and again.key() == config.key()
    assert type(again.torchao_config()) is Int8WeightOnlyConfig


def test_module_default_name_is_the_qualified_class_name_and_slashes_are_replaced():
    assert ait.Module(SleepyAffine(0.0)).name == "tests.helpers.SleepyAffine"
    assert ait.Module(SleepyAffine(0.0), name="org/model").name == "org_model"


def test_kernel_profiler_and_optimizer_warm_up_three_times():
    profile = inspect.signature(ModuleFunctionKernelProfiler.profile).parameters["warmup_iterations"]
    assert profile.default == 3
    assert inspect.signature(KernelOptimizer).parameters["warmup_iterations"].default == 3


def test_kernel_generation_timeout_reads_the_environment_variable():
    code = ("from aitune_ray.backend import KernelSelectorBackendConfig; "
            "from aitune_ray.kernel_forge.optimizer import DEFAULT_GENERATION_TIMEOUT as d; "
            "print(d, KernelSelectorBackendConfig().generation_timeout)")
    env = {**os.environ, "AITUNE_KERNEL_GENERATION_TIMEOUT": "42.5"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["42.5", "42.5"]


def test_a_provider_dict_in_aitunes_form_loads_and_ours_keeps_aitunes_keys():
    from aitune_ray.kernel_forge.kernel_provider import TorchSDPAKernelProvider, kernel_provider_from_dict

    provider = kernel_provider_from_dict({"type": "TorchSDPAKernelProvider", "backend": "MATH"})   # AITune's form
    assert type(provider) is TorchSDPAKernelProvider and provider.is_ready
    data = provider.to_dict()
    assert data["type"] == "TorchSDPAKernelProvider" and data["backend"] == "MATH"
    assert set(data) - {"type", "backend"} <= {"class", "ready", "tolerance", "pin_op"}   # the documented extras
