"""TunerActor: one per GPU, a thin Ray shell around the worker core (aitune_ray.worker.core.Worker): its own
log file and faulthandler, its identity (node, GPU) and readable name, the warm-up, object references
fetched once each, large artifacts put in the object store (actors.setup has the process set-up).
aitune_ray.cluster.pool makes it an actor pinned to its resources.
"""

from __future__ import annotations

import time

IMPORT_BEGAN_AT = time.time()   # wall clock: this module's import began (Ray fetched the actor's class)

import logging
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch

from actors.setup import describe, open_log, process_started_at, start_warm_up
from aitune_ray.records.failures import pack_exception
from aitune_ray.measure.request import set_process_kind
from aitune_ray.measure.turns import shares_gpu
from aitune_ray.records.results import CandidateJob
from aitune_ray.worker.core import Worker, device_for

logger = logging.getLogger(__name__)
IMPORTED_AT = time.time()   # and ended (torch and the worker core imported)


def _fetch(box: list) -> Any:
    return ray.get(list(box)) if isinstance(box[0], ray.ObjectRef) else list(box)


def _token(box: list) -> tuple:
    return tuple(ref.hex() if hasattr(ref, "hex") else id(ref) for ref in box)


class TunerActor:
    """slot: this actor's place in the pool. log_path: this actor's own log file (on its node).
    limit_bytes / artifact_dir: how artifacts travel back (see aitune_ray.records.artifacts). gpu_share: the GPUs
    it holds (below 1: it shares its GPU with other actors, and takes turns at it; turns: with the driver)."""

    def __init__(self, slot: int, log_path: str, limit_bytes: int, artifact_dir: str | None = None,
                 warm_up: str = "compile", gpu_share: float = 1.0, turns: bool = False):
        started = time.time()
        set_process_kind("actor")   # the sessions timed here say so
        self.slot, self.log_path, self.limit_bytes, self.artifact_dir = slot, log_path, limit_bytes, artifact_dir
        self._log = open_log(log_path)
        self._identity = {**describe(slot), "log_path": log_path, "started_at": started,
                          "import_began_at": IMPORT_BEGAN_AT, "imported_at": IMPORTED_AT,
                          "process_started_at": process_started_at(), "described_at": time.time()}
        # Beside the logs: the driver removes it at close on its node; cleanup() on the others
        workdir = Path(tempfile.mkdtemp(prefix=f"work-actor{slot}-", dir=Path(log_path).parent))
        self.worker = Worker(workdir, self._identity, log_path, shares_gpu=turns or shares_gpu(gpu_share))
        logger.info("actor %d (%r) started: pid %d, %s", slot, self, os.getpid(), self._identity)
        self._warm = start_warm_up(self._identity["node_id"], warm_up, gpu_share)   # the first task stops it
        self._identity["threads"] = torch.get_num_threads()
        self._identity["ready_at"] = time.time()   # wall clock: up, its warm-up under way (benchmarks read it)

    def __repr__(self) -> str:   # Ray's dashboard and log prefixes show this name
        ids = ",".join(self._identity.get("gpu_ids") or []) if hasattr(self, "_identity") else ""
        where = f"gpu{ids}" if ids else f"cpu{self.slot}"
        return f"tuner {where}@{socket.gethostname()}"

    def identity(self) -> dict:   # where this actor runs, when it started, and its warm-up so far
        return {**self._identity, **(self._warm.stamps() if self._warm else {})}

    def _ready(self) -> None:   # before a task: the warm-up ends after its step under way
        if self._warm is not None:
            self._warm.stop()

    def cleanup(self) -> None:
        """Remove this actor's work folder (called before the pool shuts it down)."""
        self.worker.close()

    def stats(self) -> dict:
        return {**self.worker.stats(), "slot": self.slot}

    def _load(self, name: str, box: list, intent: str) -> None:
        self._ready()
        device = device_for(intent)
        if intent == "cuda" and device.type == "cpu":
            logger.warning("the driver asked for cuda but this worker has no CUDA device: using the CPU")
        self.worker.load(name, _token(box) + (intent,), lambda: _fetch(box), device)

    def discard(self, name: str) -> None:
        self.worker.discard(name)

    def release(self, name: str, key: str) -> None:
        self.worker.release(name, key)

    def baseline(self, name: str, box: list, intent: str, request: dict) -> dict[int, dict]:
        """Eager timed here as request (a TimingRequest's dict, in the user's serving context) says."""
        self._load(name, box, intent)
        return self.worker.baseline(name, request)

    def run(self, name: str, box: list, intent: str, job: dict) -> dict:
        """One candidate. Returns {"result": BuildResult dict, "refs": {name: ref} of artifacts too large to
        travel inside the result (no artifact_dir), "exception": the build's exception, pickled, or None,
        "began_at"/"ended_at": this call's wall-clock start and end here}."""
        began_at = time.time()
        self._load(name, box, intent)
        result = self.worker.run(name, CandidateJob(**job))
        large = self.worker.pack(name, result, self.limit_bytes, self.artifact_dir)
        refs = {n: ray.put(p.read_bytes()) for n, p in large.items()}
        return {"result": result.to_dict(), "refs": refs, "exception": pack_exception(result.exception),
                "began_at": began_at, "ended_at": time.time()}

    def confirm(self, name: str, box: list, intent: str, finalists: list[dict], request: dict) -> dict:
        """The confirm session of the finalists ({"key", "spec", "state", "artifacts"}) here (Worker.confirm), as
        request (a TimingRequest's dict) says: this actor runs it with the request's torch thread count (the
        user's), and its own again after."""
        self._load(name, box, intent)
        return self.worker.confirm(name, finalists, request)

    def forge(self, task: str, box: list, intent: str, *args: Any) -> dict:
        """A kernel-forge task (benchmark, generate, original, interleaved; see aitune_ray.kernel_forge.tasks)
        on the function data in box ([ObjectRef] of one function's CPU FunctionData)."""
        self._ready()
        data = (_token(box), lambda: _fetch(box)[0])
        return self.worker.forge_task(task, data, device_for(intent), *args)
