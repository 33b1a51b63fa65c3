"""Builds that wait on events, for the job-level schedule's tests. Importable by Ray workers
(tests.schedule_helpers): a TurnstileBackend's build checks in at a named Turnstile actor and waits there
until the test lets every build go, so what runs at once is set by events, never by durations."""

from __future__ import annotations

import asyncio
import dataclasses

from tests.ray_helpers import FastBackend, HelperConfig

NAMESPACE = "aitune-ray-schedule-tests"


@dataclasses.dataclass
class TurnstileConfig(HelperConfig):
    """turnstile: the Turnstile actor's name. fail: the build raises once let through."""

    turnstile: str = ""
    fail: bool = False


class TurnstileBackend(FastBackend):
    config_class = TurnstileConfig

    def _build(self, module, samples, device, workdir):
        if self.config.turnstile and len(samples):   # a restore (no samples) does not wait
            import ray

            turnstile = ray.get_actor(self.config.turnstile, namespace=NAMESPACE)
            ray.get(turnstile.arrive.remote(self.config.tag, ray.get_runtime_context().get_node_id()))
        if self.config.fail:
            raise RuntimeError(f"build {self.config.tag} fails on purpose")
        super()._build(module, samples, device, workdir)


class Turnstile:
    """A named async actor: arrive() records who came (tag, node id) and blocks until release();
    wait_count(n) returns the arrivals once there are n."""

    def __init__(self):
        self._released = asyncio.Event()
        self._changed = asyncio.Condition()
        self._arrivals: list[tuple[int, str]] = []

    async def arrive(self, tag: int, node_id: str = "") -> None:
        async with self._changed:
            self._arrivals.append((tag, node_id))
            self._changed.notify_all()
        await self._released.wait()

    async def wait_count(self, count: int) -> list[tuple[int, str]]:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._arrivals) >= count)
            return list(self._arrivals)

    async def arrivals(self) -> list[tuple[int, str]]:
        return list(self._arrivals)

    async def release(self) -> None:
        self._released.set()


def start_turnstile(name: str):
    import ray

    return ray.remote(num_cpus=0)(Turnstile).options(name=name, namespace=NAMESPACE).remote()


def gated(turnstile: str, tag: int, **config) -> TurnstileBackend:
    return TurnstileBackend(TurnstileConfig(turnstile=turnstile, tag=tag, **config))
