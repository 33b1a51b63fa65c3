"""Bell: an actor whose wait() returns once ring() was called, so that the driver's schedule can wait on
Ray's futures alone (its tasks, its actors' start) and still wake when new work is queued."""

from __future__ import annotations

import asyncio
import socket


class Bell:
    def __init__(self):
        self._rung = asyncio.Event()

    def __repr__(self) -> str:   # Ray's dashboard shows this name
        return f"schedule bell@{socket.gethostname()}"

    async def ring(self) -> None:
        self._rung.set()

    async def wait(self) -> None:
        await self._rung.wait()
        self._rung.clear()
