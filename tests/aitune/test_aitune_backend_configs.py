"""AITune 0.6.0's unit tests of its backend configs (tests/unit/torch/backend/test_torch_eager_backend.py,
test_torch_inductor_jit_backend.py, test_onnx_runtime_backend.py: the tests of the configs), ported: the same
configs and assertions, `aitune.torch` read as `aitune_ray`. AITune's tests that build a backend through its
`Backend.build(model, graph_spec=, data=, device=, cache_dir=)` and `TorchSaveTask` are not ported: a backend
here is built by `_build(module, samples, device, workdir)` and saved in one `.ait` file (docs/aitune.md,
`Backend`; tests/test_backends.py covers the builds). Where this package differs on purpose (docs/aitune.md,
`Backend`: to_dict() before the build gives the spec; a config's from_dict() takes plain data, a dtype by its
name), the ported test checks the behaviour here."""

import pytest
import torch

from aitune_ray.backend.onnx_runtime_backend import (ONNXExecutionProvider, ONNXRuntimeBackend,
                                                     ONNXRuntimeBackendConfig)
from aitune_ray.backend.torch_eager import TorchEagerBackendConfig
from aitune_ray.backend.torch_inductor_jit_backend import TorchInductorJitBackend, TorchInductorJitBackendConfig
from aitune_ray.errors import ConfigError


def test_eager_config_from_dict_defaults():
    assert TorchEagerBackendConfig.from_dict({}) == TorchEagerBackendConfig()


def test_eager_config_from_dict_custom_fields():
    config = TorchEagerBackendConfig.from_dict({"autocast_enabled": True, "autocast_dtype": "float16"})
    assert config.autocast_enabled is True and config.autocast_dtype == "float16"
    with pytest.raises(ConfigError, match="autocast_dtype"):   # AITune's torch.float16: not plain data
        TorchEagerBackendConfig.from_dict({"autocast_enabled": True, "autocast_dtype": torch.float16})


def test_eager_config_from_dict_round_trip():
    original = TorchEagerBackendConfig(autocast_enabled=True)
    assert TorchEagerBackendConfig.from_dict(original.to_dict()) == original


def test_torch_inductor_backend_with_mode_and_options():
    with pytest.raises(ValueError, match="Cannot specify both 'mode' and 'options' parameters in config. "):
        TorchInductorJitBackend(config=TorchInductorJitBackendConfig(mode="max-autotune",
                                                                     options={"max_autotune": True}))


def test_torch_inductor_config_rejects_invalid_mode():
    with pytest.raises(ValueError, match="Invalid mode"):
        TorchInductorJitBackendConfig(mode="invalid")


def test_inductor_jit_config_from_dict_defaults():
    assert TorchInductorJitBackendConfig.from_dict({}) == TorchInductorJitBackendConfig()


def test_inductor_jit_config_from_dict_custom_fields():
    config = TorchInductorJitBackendConfig.from_dict({"fullgraph": True, "mode": "max-autotune"})
    assert config.fullgraph is True and config.mode == "max-autotune"


def test_inductor_jit_config_from_dict_round_trip():
    original = TorchInductorJitBackendConfig(fullgraph=True, dynamic=True)
    assert TorchInductorJitBackendConfig.from_dict(original.to_dict()) == original


def test_config_key_is_stable():
    assert ONNXRuntimeBackendConfig().key() == ONNXRuntimeBackendConfig().key()   # equal configs, apart
    assert ONNXRuntimeBackendConfig.from_dict(ONNXRuntimeBackendConfig().to_dict()).key() == \
        ONNXRuntimeBackendConfig().key()


def test_config_key_differs_for_use_dynamo():
    assert ONNXRuntimeBackendConfig(use_dynamo=False).key() != ONNXRuntimeBackendConfig(use_dynamo=True).key()


def test_config_describe_default():
    assert ONNXRuntimeBackendConfig().describe() == ""


def test_config_roundtrip():
    config = ONNXRuntimeBackendConfig(use_dynamo=True)
    assert ONNXRuntimeBackendConfig.from_dict(config.to_dict()).use_dynamo == config.use_dynamo


def test_config_key_differs_for_tensorrt_ep():
    assert (ONNXRuntimeBackendConfig(execution_provider=ONNXExecutionProvider.TENSORRT).key()
            != ONNXRuntimeBackendConfig(execution_provider=ONNXExecutionProvider.CUDA).key())


def test_config_describe_includes_execution_provider():
    config = ONNXRuntimeBackendConfig(execution_provider=ONNXExecutionProvider.TENSORRT)
    assert "execution_provider" in config.describe()


def test_to_dict_before_build_gives_the_spec():
    """AITune's test_to_dict_before_build_raises: before the build, to_dict() here gives what recreates the
    backend unbuilt, and nothing of a build."""
    backend = ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False))
    assert backend.to_dict() == {"spec": backend.spec()}
    assert backend.to_dict()["spec"]["config"]["use_dynamo"] is False


def test_onnx_config_from_dict_defaults():
    assert ONNXRuntimeBackendConfig.from_dict({}) == ONNXRuntimeBackendConfig()


def test_onnx_config_from_dict_string_execution_provider_cuda():
    assert ONNXRuntimeBackendConfig.from_dict({"execution_provider": "cuda"}).execution_provider == \
        ONNXExecutionProvider.CUDA


def test_onnx_config_from_dict_string_execution_provider_tensorrt():
    assert ONNXRuntimeBackendConfig.from_dict({"execution_provider": "tensorrt"}).execution_provider == \
        ONNXExecutionProvider.TENSORRT


def test_onnx_config_from_dict_none_execution_provider():
    assert ONNXRuntimeBackendConfig.from_dict({"execution_provider": None}).execution_provider is None


def test_onnx_config_rejects_invalid_execution_provider():
    with pytest.raises(ValueError, match="Invalid execution_provider"):
        ONNXRuntimeBackendConfig(execution_provider="invalid")


def test_onnx_config_from_dict_round_trip():
    original = ONNXRuntimeBackendConfig(execution_provider=ONNXExecutionProvider.CUDA, use_dynamo=False)
    assert ONNXRuntimeBackendConfig.from_dict(original.to_dict()) == original
