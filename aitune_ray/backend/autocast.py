"""autocast_enabled / autocast_dtype, AITune's options of Eager, Inductor JIT and Torch-TensorRT JIT.

As in AITune, the backend runs under torch.autocast only when autocast_enabled is True, with autocast_dtype
(None: torch.autocast's default for the device), and callers get outputs in the dtype the module returns
without autocast. autocast_dtype is kept as its name ("bfloat16"), so that configs stay plain data; a
torch.dtype is accepted and turned into it. autocast_dtype without autocast_enabled=True is refused, since
AITune would ignore it and this project formerly read it as switching autocast on.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from aitune_ray.errors import ConfigError
from aitune_ray.model.samples import map_structure

AUTOCAST_DTYPES = ("float16", "bfloat16")


def check_autocast(config: Any) -> None:
    """Normalize and check config.autocast_enabled / config.autocast_dtype in place."""
    dtype = config.autocast_dtype
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        dtype = dtype.removeprefix("torch.")
    if dtype is not None and dtype not in AUTOCAST_DTYPES:
        raise ConfigError(f"autocast_dtype must be one of {AUTOCAST_DTYPES} (or torch.float16 / torch.bfloat16), "
                          f"got {config.autocast_dtype!r}")
    if not isinstance(config.autocast_enabled, bool):
        raise ConfigError(f"autocast_enabled must be a bool, got {config.autocast_enabled!r}")
    if dtype is not None and not config.autocast_enabled:
        raise ConfigError(f"autocast_dtype={dtype!r} takes effect only with autocast_enabled=True (as in AITune): "
                          "add autocast_enabled=True, or leave autocast_dtype out")
    config.autocast_dtype = dtype


def autocast_tolerance_dtype(config: Any, device_type: str = "cuda") -> torch.dtype | None:
    """The reduced dtype the outputs are computed in under autocast (None without autocast)."""
    if not config.autocast_enabled:
        return None
    if config.autocast_dtype is not None:
        return getattr(torch, config.autocast_dtype)
    return torch.get_autocast_dtype(device_type)


class Autocast:
    """Runs a callable under the config's autocast and casts floating outputs back to out_dtype."""

    def __init__(self, config: Any, device: torch.device, out_dtype: torch.dtype):
        self.enabled = config.autocast_enabled
        self.device_type = device.type
        self.dtype = getattr(torch, config.autocast_dtype) if config.autocast_dtype else None
        self.out_dtype = out_dtype

    def context(self):
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def call(self, fn, *args: Any, **kwargs: Any) -> Any:
        if not self.enabled:
            return fn(*args, **kwargs)
        with self.context():
            out = fn(*args, **kwargs)
        return map_structure(out, lambda t: t.to(self.out_dtype) if t.is_floating_point() else t)


def module_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype a module returns without autocast: that of its first floating parameter."""
    floating = [p.dtype for p in module.parameters() if p.dtype.is_floating_point]
    return floating[0] if floating else torch.get_default_dtype()
