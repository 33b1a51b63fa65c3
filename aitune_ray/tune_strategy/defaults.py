"""AITune 0.6.0's default candidate lists, for strategies given no backends (AOT and JIT workflows).

AITune's lists name TensorRT (through torch.export and through ONNX), Inductor AOT, Torch-TensorRT AOT and
Inductor JIT; every one of those backends exists here. A candidate that cannot build on this machine (TensorRT
without a GPU) is a failed result of that candidate, and the others go on.
"""

from __future__ import annotations

from aitune_ray.errors import ConfigError

WORKFLOWS = ("aot", "jit")


def _tensorrt_pair() -> list:
    from aitune_ray.backend import TensorRTBackend, TensorRTBackendConfig

    return [TensorRTBackend(), TensorRTBackend(TensorRTBackendConfig(use_dynamo=False))]


def default_backends(strategy: str, workflow: str) -> list:
    """The candidates AITune's `strategy` (a class name) tries by default in `workflow` ("aot" or "jit")."""
    from aitune_ray.backend import (TorchInductorAotBackend, TorchInductorJitBackend, TorchTensorRTAotBackend)

    if workflow not in WORKFLOWS:
        raise ConfigError(f"unknown tuning workflow {workflow!r}; expected 'aot' or 'jit'")
    if strategy == "FirstWinsStrategy" or (strategy == "MaxThroughputStrategy" and workflow == "jit"):
        return [*_tensorrt_pair(), TorchInductorJitBackend()]
    if strategy in ("MaxThroughputStrategy", "MinLatencyStrategy", "LatencyBudgetStrategy"):   # both workflows
        return [*_tensorrt_pair(), TorchInductorAotBackend(), TorchTensorRTAotBackend(), TorchInductorJitBackend()]
    raise ConfigError(f"{strategy} has no default backends: pass the backends to try")
