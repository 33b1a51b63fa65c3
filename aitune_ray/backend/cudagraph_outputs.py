"""Calls of a torch.compile'd module that may replay CUDA graphs: each caller gets outputs of its own.

A mode that captures CUDA graphs ("reduce-overhead", "max-autotune", or the triton.cudagraphs option) hands
back tensors in the graph's own output memory, which the next replay overwrites. A caller that keeps an
output across calls (the correctness check, a user's list of results) would read the later call's values,
and torch raises when it notices. So every such call starts a new graph step and clones what it returns.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from aitune_ray.model.samples import map_structure

GRAPH_MODES = ("reduce-overhead", "max-autotune")


def captures_graphs(device: torch.device | None, mode: str | None, options: dict | None = None) -> bool:
    """Whether torch.compile with this mode and these options replays CUDA graphs on device."""
    if device is None or device.type != "cuda":
        return False
    return mode in GRAPH_MODES or bool((options or {}).get("triton.cudagraphs"))


def call_owned(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) as a new CUDA graph step, its tensors cloned out of the graph's memory."""
    torch.compiler.cudagraph_mark_step_begin()
    return map_structure(fn(*args, **kwargs), torch.Tensor.clone)
