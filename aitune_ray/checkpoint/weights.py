"""A module's state_dict to and from safetensors, and the checks a load makes before it copies anything."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from aitune_ray.errors import CheckpointError, CheckpointMismatchError


def tensors_for_save(module: nn.Module, where: str) -> dict[str, torch.Tensor]:
    """The state_dict as CPU tensors that safetensors accepts: every tensor owning its whole storage.

    Tied weights (two names, one storage), views and non-contiguous tensors are cloned; the rest are not.
    """
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for key, value in module.state_dict().items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"module {where!r}: state_dict entry {key!r} is a {type(value).__name__}, not a "
                                  "tensor; only tensors are stored (a checkpoint never pickles objects)")
        if type(value) not in (torch.Tensor, nn.Parameter):
            raise CheckpointError(f"module {where!r}: state_dict entry {key!r} is a tensor subclass "
                                  f"({type(value).__name__}) that safetensors cannot store")
        tensor = value.detach()
        if tensor.device.type == "meta":
            raise CheckpointError(f"module {where!r}: tensor {key!r} is on the meta device and has no data")
        tensor = tensor.to("cpu")
        storage = tensor.untyped_storage()
        whole = (tensor.is_contiguous() and tensor.storage_offset() == 0
                 and tensor.numel() * tensor.element_size() == storage.nbytes())
        if not whole or storage.data_ptr() in seen:
            tensor = tensor.clone(memory_format=torch.contiguous_format)
        elif tensor.numel():
            seen.add(storage.data_ptr())
        out[key] = tensor
    return out


def save_weights(module: nn.Module, where: str, target: Path) -> None:
    from safetensors.torch import save_file

    tensors = tensors_for_save(module, where)
    try:
        save_file(tensors, str(target), metadata={"format": "pt", "module": where})
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types
        raise CheckpointError(f"module {where!r}: weights cannot be written as safetensors: "
                              f"{type(exc).__name__}: {exc}") from exc


def read_weights(source: Path, where: str) -> dict[str, torch.Tensor]:
    """Load a verified safetensors file onto the CPU."""
    from safetensors.torch import load_file

    try:
        return load_file(str(source), device="cpu")
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"module {where!r}: weights cannot be read: {type(exc).__name__}: {exc}") from exc


def check_matches(module: nn.Module, tensors: dict[str, torch.Tensor], where: str) -> None:
    """Raise CheckpointMismatchError unless the tensors have exactly the module's keys, shapes and dtypes (a
    load never casts: complex, bool or float8 weights in a float module are another model, or an attack)."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing from the checkpoint: {_few(missing)}")
        if unexpected:
            parts.append(f"not in the module: {_few(unexpected)}")
        raise CheckpointMismatchError(f"module {where!r}: the checkpoint's weights belong to another model "
                                      f"({'; '.join(parts)})")
    for key, have in expected.items():
        if not isinstance(have, torch.Tensor):
            raise CheckpointMismatchError(f"module {where!r}: state_dict entry {key!r} is not a tensor")
        stored = tensors[key]
        if tuple(stored.shape) != tuple(have.shape):
            raise CheckpointMismatchError(f"module {where!r}: tensor {key!r} has shape {tuple(stored.shape)} in the "
                                          f"checkpoint but {tuple(have.shape)} in the module")
        if stored.dtype != have.dtype:
            raise CheckpointMismatchError(f"module {where!r}: tensor {key!r} is {_dtype(stored)} in the checkpoint "
                                          f"but {_dtype(have)} in the module; a load never casts weights (cast the "
                                          "module first if this checkpoint is yours)")


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).replace("torch.", "")


def _few(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
