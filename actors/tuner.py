"""TunerActor: one per GPU, a thin Ray shell around the worker core (aitune_ray.worker.Worker): its own
log file and faulthandler, its identity (node, GPU), the warm-up, object references fetched once each,
large artifacts put in the object store. aitune_ray.cluster.pool makes it an actor pinned to its resources.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
import torch

from aitune_ray.failures import pack_exception
from aitune_ray.results import CandidateJob
from aitune_ray.worker import Worker, device_for, warm_up

logger = logging.getLogger(__name__)


def _node_gpus(node_id: str) -> float:
    """GPUs on this actor's node, from Ray's view of the cluster (0 when unknown)."""
    return next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == node_id), 0.0)


def _fetch(box: list) -> Any:
    return ray.get(list(box)) if isinstance(box[0], ray.ObjectRef) else list(box)


def _token(box: list) -> tuple:
    return tuple(ref.hex() if hasattr(ref, "hex") else id(ref) for ref in box)


class TunerActor:
    """slot: this actor's place in the pool. log_path: this actor's own log file (on its node).
    limit_bytes / artifact_dir: how artifacts travel back (see aitune_ray.artifacts)."""

    def __init__(self, slot: int, log_path: str, limit_bytes: int, artifact_dir: str | None = None):
        started = time.time()
        self.slot, self.log_path, self.limit_bytes, self.artifact_dir = slot, log_path, limit_bytes, artifact_dir
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", buffering=1)
        handler = logging.StreamHandler(self._log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.INFO)
        faulthandler.enable(file=self._log, all_threads=True)  # a segfault leaves its traceback here
        self._identity = self._describe()
        # Beside the logs, in a folder the driver removes when it closes (on its own node; on the others
        # cleanup() does it for actors still alive then).
        workdir = Path(tempfile.mkdtemp(prefix=f"work-actor{slot}-", dir=Path(log_path).parent))
        self.worker = Worker(workdir, self._identity, log_path)
        logger.info("actor %d started: pid %d, %s", slot, os.getpid(), self._identity)
        self._identity["started_at"] = started
        if torch.cuda.is_available():
            # Share the node's CPUs between the actors' compile workers (Ray starts workers with
            # OMP_NUM_THREADS=1, the actor's CPU reservation; host-side compiles need more).
            gpus = _node_gpus(self._identity["node_id"]) if self._identity["node_id"] else 0
            share = max(2, (os.cpu_count() or 2) // max(1, int(gpus or torch.cuda.device_count())))
            self._identity["warm_up"] = warm_up(share)
        self._identity["threads"] = torch.get_num_threads()
        self._identity["ready_at"] = time.time()   # wall clock: up and warmed (benchmarks read it)

    def _describe(self) -> dict:
        try:
            ip, node_id = ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()
        except Exception:  # outside Ray (tests calling the class directly)
            ip, node_id = "", ""
        gpu_ids = [str(i) for i in ray.get_gpu_ids()] if ray.is_initialized() else []
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            uuid = str(getattr(props, "uuid", ""))
            gpu = f"{props.name} #{','.join(gpu_ids) or '0'}" + (f" ({uuid})" if uuid else "")
        else:   # a logical GPU without CUDA is still an identity of its own
            gpu = f"cpu (Ray GPU {','.join(gpu_ids)})" if gpu_ids else f"cpu (actor {self.slot})"
        where = ", ".join(p for p in (ip, f"node {node_id[:8]}" if node_id else "") if p)
        host = socket.gethostname()
        return {"node": f"{host} ({where})" if where else host, "node_id": node_id, "gpu": gpu, "gpu_ids": gpu_ids,
                "cuda": torch.cuda.is_available(), "pid": os.getpid(), "log_path": self.log_path, "slot": self.slot}

    def identity(self) -> dict:
        return dict(self._identity)

    def cleanup(self) -> None:
        """Remove this actor's work folder (called before the pool shuts it down)."""
        self.worker.close()

    def stats(self) -> dict:
        return {**self.worker.stats(), "slot": self.slot}

    def _load(self, name: str, box: list, intent: str) -> None:
        device = device_for(intent)
        if intent == "cuda" and device.type == "cpu":
            logger.warning("the driver asked for cuda but this worker has no CUDA device: using the CPU")
        self.worker.load(name, _token(box) + (intent,), lambda: _fetch(box), device)

    def discard(self, name: str) -> None:
        self.worker.discard(name)

    def release(self, name: str, key: str) -> None:
        self.worker.release(name, key)

    def baseline(self, name: str, box: list, intent: str, measure: dict) -> dict[int, dict]:
        self._load(name, box, intent)
        return self.worker.baseline(name, measure)

    def run(self, name: str, box: list, intent: str, job: dict) -> dict:
        """One candidate. Returns {"result": BuildResult dict, "refs": {name: ref} of artifacts too large to
        travel inside the result (no artifact_dir), "exception": the build's exception, pickled, or None}."""
        self._load(name, box, intent)
        result = self.worker.run(name, CandidateJob(**job))
        large = self.worker.pack(name, result, self.limit_bytes, self.artifact_dir)
        refs = {n: ray.put(p.read_bytes()) for n, p in large.items()}
        return {"result": result.to_dict(), "refs": refs, "exception": pack_exception(result.exception)}

    def remeasure(self, name: str, box: list, intent: str, finalists: list[dict], rounds: int) -> dict:
        """Eager and every finalist ({"key", "spec", "state", "artifacts"}) timed in turn here."""
        self._load(name, box, intent)
        return self.worker.remeasure(name, finalists, rounds)

    def forge(self, task: str, box: list, intent: str, *args: Any) -> dict:
        """A kernel-forge task (benchmark, generate, original, interleaved; see aitune_ray.kernel_forge.tasks)
        on the function data in box ([ObjectRef] of one function's CPU FunctionData)."""
        data = (_token(box), lambda: _fetch(box)[0])
        return getattr(self.worker.forge, task)(data, device_for(intent), *args)
