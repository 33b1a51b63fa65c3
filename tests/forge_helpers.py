"""Models, kernel providers and generators for the kernel forge tests.

The test providers replace F.gelu or F.layer_norm and behave as their ``behavior`` says:
- "exact": the same values, computed another way (gelu through erf, so a captured graph shows it);
- "cached": exact, and when called again with the same unchanged input tensor (what a benchmark
  does) it returns the output it computed before, so it measures much faster than the original;
- "slow": exact after sleeping delay_s; "zeros", "negated", "off3" (3 % too large): wrong values;
- "raises": raises at every call; "unsupported": prepare() says no.
Every call is counted in CALLS by (class name, behavior), in whichever process runs it.
SleepyEagerBackend: a plain backend whose build takes build_s (for builds that overlap a kernel plan).
"""

from __future__ import annotations

import collections
import math
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_ray.backend import Backend
from aitune_ray.kernel_forge import KernelGenerationResult, KernelGenerator, KernelProvider
from tests.ray_helpers import HelperConfig

CALLS: collections.Counter = collections.Counter()
BEHAVIORS = ("exact", "cached", "slow", "zeros", "negated", "off3", "raises", "unsupported")


# ----- models -----------------------------------------------------------------------------------------

class Attention(nn.Module):
    """One scaled_dot_product_attention call (what the SDPA providers replace)."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class ForgeBlock(nn.Module):
    """Pre-norm transformer block: norm1 -> attn (SDPA), norm2 -> ffn (gelu)."""

    def __init__(self, dim: int = 32, heads: int = 4, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class GeluNorm(nn.Module):
    """A gelu-heavy and layer_norm-heavy module without attention (fast to profile and compile)."""

    def __init__(self, dim: int = 256, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.gelu(self.norm(x)))


def block_samples(batches=(2, 2, 3), seq: int = 16, dim: int = 32) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(b, seq, dim, generator=gen) for b in batches]


# ----- providers ----------------------------------------------------------------------------------------

def gelu_by_erf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _capturing() -> bool:
    return bool(torch.compiler.is_compiling() or torch.compiler.is_exporting())


class _TestProvider(KernelProvider):
    function = ""

    def __init__(self, behavior: str = "exact", delay_s: float = 0.003):
        super().__init__()
        if behavior not in BEHAVIORS:
            raise ValueError(behavior)
        self.behavior = behavior
        self.delay_s = delay_s
        self._seen: dict[int, tuple] = {}

    @property
    def supported_function(self) -> str:
        return self.function

    @property
    def name(self) -> str:
        return f"test {self.function} {self.behavior}"

    def _prepare(self, samples) -> bool:
        if self.behavior == "unsupported":
            return self.unsupported("this test provider supports nothing")
        return True

    def _exact(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        CALLS[(type(self).__name__, self.behavior)] += 1
        b = self.behavior
        if b == "raises":
            raise RuntimeError("this test kernel always fails")
        if b == "cached" and not _capturing():
            return self._cached(*args, **kwargs)
        out = self._exact(*args, **kwargs)
        if b == "slow":
            time.sleep(self.delay_s)
        elif b == "zeros":
            out = torch.zeros_like(out)
        elif b == "negated":
            out = -out
        elif b == "off3":
            out = out * 1.03
        return out

    def _cached(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        x = args[0]
        seen = self._seen.get(id(x))
        if seen is not None and seen[0]() is x and seen[1] == x._version and seen[2] == kwargs:
            return seen[3]
        out = self._exact(*args, **kwargs)
        if len(self._seen) >= 8:
            self._seen.clear()
        self._seen[id(x)] = (weakref.ref(x), x._version, dict(kwargs), out)
        return out

    def _to_dict(self) -> dict:
        return {"behavior": self.behavior, "delay_s": self.delay_s}

    @classmethod
    def _from_dict(cls, data: dict) -> "_TestProvider":
        return cls(data["behavior"], data.get("delay_s", 0.003))


class TestGeluProvider(_TestProvider):
    __test__ = False
    function = "gelu"

    def _exact(self, x, approximate: str = "none"):
        return gelu_by_erf(x) if approximate == "none" else F.gelu(x, approximate=approximate)


class TestLayerNormProvider(_TestProvider):
    __test__ = False
    function = "layer_norm"

    def _exact(self, *args, **kwargs):
        return F.layer_norm(*args, **kwargs)


def ready(provider: KernelProvider) -> KernelProvider:
    assert provider.prepare([])
    return provider


# ----- generators ----------------------------------------------------------------------------------------

class NeverFinishingGenerator(KernelGenerator):
    """Its futures never complete."""

    def supports_functions(self) -> list[str]:
        return ["gelu", "layer_norm"]

    def submit(self, function, samples) -> Future:
        CALLS[("NeverFinishingGenerator", function)] += 1
        return Future()


class QuickGelu(KernelGenerator):
    """Generates a test gelu provider after delay_s seconds (on the base class's thread)."""

    def __init__(self, behavior: str = "cached", delay_s: float = 0.0):
        self.behavior = behavior
        self.delay_s = delay_s

    def supports_functions(self) -> list[str]:
        return ["gelu"]

    def generate(self, function, samples) -> KernelGenerationResult:
        time.sleep(self.delay_s)
        provider = TestGeluProvider(self.behavior)
        if not provider.prepare(samples):
            return KernelGenerationResult(function, None, provider.name, error=provider.reason)
        return KernelGenerationResult(function, provider, f"generated {provider.name}")

    def _to_dict(self) -> dict:
        return {"behavior": self.behavior, "delay_s": self.delay_s}


class RaisingGenerator(KernelGenerator):
    def supports_functions(self) -> list[str]:
        return ["gelu"]

    def generate(self, function, samples):
        raise RuntimeError("the generator broke")


def call_in_thread(fn, *args):
    """Run fn(*args) on another thread and return its result."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("out", fn(*args)))
    thread.start()
    thread.join()
    return box["out"]


# ----- backends ------------------------------------------------------------------------------------------

class SleepyEagerBackend(Backend):
    """The module itself, after a build that sleeps build_s (a plain build that takes a while)."""

    config_class = HelperConfig

    def _build(self, module, samples, device, workdir):
        time.sleep(self.config.build_s)
        self._module = module

    def _infer(self, *args, **kwargs):
        return self._module(*args, **kwargs)


@pytest.fixture(autouse=True)
def one_thread():
    """Two busy cores make OpenMP's intra-op threads time very noisily; one thread times steadily.
    Autouse in every test module that imports it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
