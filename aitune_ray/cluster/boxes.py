"""Boxes: what a module's tasks carry to the actors: its module and samples, put in Ray's object store once
per module (on the CPU), and the device kind the actors use for it. A part of RayExecutor
(aitune_ray.cluster.ray_executor), made with the one thing it needs of the executor: how to wait until Ray is up.
"""

from __future__ import annotations

import time
from typing import Callable

import ray
import torch

from aitune_ray.cluster.session import cpu_module, tensors_of_sample
from aitune_ray.worker.seam import TuneContext


def intent(context: TuneContext) -> str:
    """The device kind the actors use for context: cuda or cpu."""
    return "cuda" if torch.device(context.device).type == "cuda" else "cpu"


class Boxes:
    """The object-store refs of each module's module and samples, and what putting them cost.

    wait_started: returns once Ray is up (a ray.put before a local Ray is up would start a second one)."""

    def __init__(self, wait_started: Callable[[], None]):
        self._wait_started = wait_started
        self._boxes: dict[str, tuple] = {}   # module name -> (module, samples, [module ref, samples ref])
        self.puts = 0       # ray.put calls made for modules and samples
        self.put_s = 0.0    # seconds those took

    def put(self, value):
        """value in Ray's object store (once Ray is up)."""
        self._wait_started()
        self.puts += 1
        started = time.perf_counter()
        try:
            return ray.put(value)
        finally:
            self.put_s += time.perf_counter() - started

    def box(self, context: TuneContext) -> list:
        """[module ref, samples ref]: put once per module; actors cache what they fetched by these refs."""
        entry = self._boxes.get(context.name)
        if entry is not None and entry[0] is context.module and entry[1] is context.samples:
            return entry[2]
        samples = context.samples
        if any(t.device.type != "cpu" for s in samples for t in tensors_of_sample(s)):
            samples = samples.to("cpu")
        box = [self.put(cpu_module(context.module)), self.put(samples)]
        self._boxes[context.name] = (context.module, context.samples, box)
        return box

    def drop(self, name: str) -> None:
        """Forget module name's refs."""
        self._boxes.pop(name, None)

    def clear(self) -> None:
        self._boxes.clear()
