"""Models and user backends for the Ray executor tests. Importable by Ray workers (tests.ray_helpers)."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import time
import weakref
from pathlib import Path

import torch
from torch import nn

from aitune_ray.backend import Backend, BackendConfig

#: Strategy options for tests whose subject is the orchestration, not the A/A check: a confirm session runs in
#: real time, and on the busy 2-core CI host its A/A control has read 0.905x [0.566, 0.941], so the module
#: rightly kept eager. Their candidates skip SlowNet's 3 ms wait (many times faster than eager), so a wide
#: tolerance changes no choice; the A/A check itself is tested on simulated sessions.
BUSY_HOST = {"noise_tolerance": 0.5}


class SlowNet(nn.Module):
    """A linear layer whose eager forward wastes `delay_s`: a backend that skips the wait is clearly faster."""

    def __init__(self, features: int = 8, delay_s: float = 0.003):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(features, features)
        self.delay_s = delay_s

    def forward(self, x):
        time.sleep(self.delay_s)
        return self.linear(x)


def recorded(name: str, strategy, sizes=(1, 4)):
    """A SlowNet wrapped in aitune_ray.Module with strategy, one call at each of sizes recorded."""
    import aitune_ray as ait

    module = ait.Module(SlowNet(), name=name, strategy=strategy)
    with torch.no_grad():
        for bs in sizes:
            module(torch.randn(bs, 8))
    return module


@dataclasses.dataclass
class HelperConfig(BackendConfig):
    """build_s: time spent building. infer_delay_s: time added to every call. tag: tells twins apart.
    wait_for: a file the build waits for (up to 60 s): the test creates it when an event it waits on has
    happened, so that the order of two builds is set by events, not by their durations."""

    build_s: float = 0.0
    infer_delay_s: float = 0.0
    tag: int = 0
    wait_for: str = ""


class FastBackend(Backend):
    """Correct and fast: calls the linear layer without the eager delay."""

    config_class = HelperConfig

    def _build(self, module, samples, device, workdir):
        time.sleep(self.config.build_s)
        if self.config.wait_for:
            deadline = time.monotonic() + 60.0
            while not Path(self.config.wait_for).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        self._linear = module.linear

    def _infer(self, x):
        if self.config.infer_delay_s:
            time.sleep(self.config.infer_delay_s)
        return self._linear(x)


class HintedBackend(FastBackend):
    """FastBackend whose build_cost hint is its build_s: a backend whose cost follows its configuration. Its
    build waits build_s; its restore (a JIT restore has no samples) does not: it loads what was compiled, as
    an engine is loaded, not built again."""

    def cost_hint(self) -> float:
        return self.config.build_s or self.build_cost

    def _build(self, module, samples, device, workdir):
        if len(samples):
            super()._build(module, samples, device, workdir)
        else:
            self._linear = module.linear


@dataclasses.dataclass
class HeldConfig(HelperConfig):
    """count_file: each build appends "tag held" to it: how many other builds this process held as it began."""

    count_file: str = ""


class HeldCountBackend(FastBackend):
    """FastBackend that, as its build begins, counts the builds of its class this worker process still holds
    (after a garbage collection): what the worker had released by then."""

    config_class = HeldConfig
    live: "weakref.WeakSet" = weakref.WeakSet()

    def _build(self, module, samples, device, workdir):
        gc.collect()
        with open(self.config.count_file, "a") as out:
            out.write(f"{self.config.tag} {len(HeldCountBackend.live)}\n")
        HeldCountBackend.live.add(self)
        super()._build(module, samples, device, workdir)


class RaisingBackend(FastBackend):
    def _build(self, module, samples, device, workdir):
        raise RuntimeError("this backend always fails to build")


class SegfaultBackend(FastBackend):
    def _build(self, module, samples, device, workdir):
        os.kill(os.getpid(), signal.SIGSEGV)


class HangingBackend(FastBackend):
    def _build(self, module, samples, device, workdir):
        time.sleep(self.config.build_s or 120.0)


class OomBackend(FastBackend):
    def _build(self, module, samples, device, workdir):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


class WeightsAotBackend(Backend):
    """An ahead-of-time user backend: its artifact is the linear layer's weights (weights.pt)."""

    config_class = HelperConfig
    is_jit = False

    def _build(self, module, samples, device, workdir):
        self._path = Path(workdir) / "weights.pt"
        torch.save({"weight": module.linear.weight.detach().cpu(), "bias": module.linear.bias.detach().cpu()},
                   self._path)
        self._load(module, {}, {"weights.pt": self._path}, device)

    def _load(self, module, state, artifacts, device):
        self._path = Path(artifacts["weights.pt"])
        data = torch.load(self._path, weights_only=True)
        self._weight, self._bias = data["weight"].to(device), data["bias"].to(device)
        self._node = os.uname().nodename

    def _infer(self, x):
        return torch.nn.functional.linear(x, self._weight, self._bias)

    def _artifacts(self):
        return {"weights.pt": self._path}


class ThreadSpy(torch.nn.Module):
    """A linear layer that writes, at every call, its process id and torch thread count to a file."""

    def __init__(self, path: str):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 8)
        self.path = path

    def forward(self, x):
        with open(self.path, "a") as out:
            out.write(f"{os.getpid()} {torch.get_num_threads()}\n")
        return self.linear(x)
