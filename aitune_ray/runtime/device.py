"""Resolve and check devices."""

from __future__ import annotations

import itertools

import torch

from aitune_ray.errors import DeviceError


def parse_device(device: str | torch.device) -> torch.device:
    """A cpu or cuda device from its name; DeviceError for anything else."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DeviceError(f"{device!r} is not a device name: {exc}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise DeviceError(f"device type {dev.type!r} is not supported (use 'cpu' or 'cuda[:N]')")
    return dev


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None: the current CUDA device when there is one, else CPU. Raises DeviceError for a missing device."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = parse_device(device)
    if dev.type == "cpu":
        return dev
    if not torch.cuda.is_available():
        raise DeviceError(f"device {device!r} was asked for, but this machine has no CUDA GPU "
                          "(use device='cpu', or a device_map on load)")
    count = torch.cuda.device_count()
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= count:
        raise DeviceError(f"device {device!r} does not exist: this machine has {count} CUDA GPU(s)")
    return torch.device("cuda", index)


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of module's first parameter or buffer (the CPU when it has none)."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


def gpu_identity(device: torch.device) -> str:
    """The GPU's name, index and UUID, or "cpu"."""
    if device.type != "cuda":
        return "cpu"
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"{torch.cuda.get_device_properties(index).name} #{index} ({gpu_uuid(index)})"


def gpu_uuid(index: int) -> str:
    """The UUID of the CUDA GPU at index ("" where torch does not report one)."""
    return str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
