"""Backends, each with its Config dataclass. Optional libraries are imported only when a backend builds."""

from aitune_ray.backend.backend import Backend, BackendConfig, BackendState
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend, BatchDispatchConfig
from aitune_ray.backend.kernel_selector_backend import KernelSelectorBackend, KernelSelectorBackendConfig
from aitune_ray.backend.onnx_autocast import ONNXAutoCastConfig
from aitune_ray.backend.onnx_runtime import ONNXExecutionProvider, ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_ray.backend.tensorrt_backend import TensorRTBackend, TensorRTBackendConfig
from aitune_ray.backend.tensorrt_profiles import ProfileMode, TensorRTProfile
from aitune_ray.backend.torch_eager import TorchEagerBackend, TorchEagerBackendConfig
from aitune_ray.backend.torch_inductor_aot import TorchInductorAotBackend, TorchInductorAotBackendConfig
from aitune_ray.backend.torch_inductor_jit import TorchInductorJitBackend, TorchInductorJitBackendConfig
from aitune_ray.backend.torch_tensorrt_aot import TorchTensorRTAotBackend, TorchTensorRTAotBackendConfig
from aitune_ray.backend.torch_tensorrt_config import TorchTensorRTConfig
from aitune_ray.backend.torch_tensorrt_jit import TorchTensorRTJitBackend, TorchTensorRTJitBackendConfig
from aitune_ray.backend.torchao_backend import TorchAOBackend, TorchAOBackendConfig

__all__ = [
    "Backend", "BackendConfig", "BackendState", "BatchDispatchBackend", "BatchDispatchConfig", "KernelSelectorBackend", "KernelSelectorBackendConfig",
    "ONNXExecutionProvider", "ONNXRuntimeBackend", "ONNXRuntimeBackendConfig",
    "TorchAOBackend", "TorchAOBackendConfig",
    "TorchEagerBackend", "TorchEagerBackendConfig",
    "TorchInductorAotBackend", "TorchInductorAotBackendConfig",
    "TorchInductorJitBackend", "TorchInductorJitBackendConfig",
    "ONNXAutoCastConfig", "ProfileMode", "TensorRTBackend", "TensorRTBackendConfig", "TensorRTProfile",
    "TorchTensorRTAotBackend", "TorchTensorRTAotBackendConfig", "TorchTensorRTConfig",
    "TorchTensorRTJitBackend", "TorchTensorRTJitBackendConfig",
]
