"""A tuner actor's process set-up: its log file and faulthandler, where it runs, its share of the CPUs."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import TextIO

import ray
import torch

from aitune_ray.runtime.warm_up import WarmUp


def open_log(log_path: str) -> TextIO:
    """Send this process's logging, a segfault's traceback and, on SIGUSR1, every thread's stack
    (faulthandler) to its own log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a", buffering=1)
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    faulthandler.enable(file=log, all_threads=True)
    if hasattr(signal, "SIGUSR1"):   # `kill -USR1 <pid>` writes every thread's stack here (a hung build)
        faulthandler.register(signal.SIGUSR1, file=log, all_threads=True, chain=False)
    return log


def describe(slot: int) -> dict:
    """Where this actor runs: node (host, IP, Ray node id), GPU (name, Ray's ids, UUID), pid."""
    try:
        ip, node_id = ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray (tests calling the class directly)
        ip, node_id = "", ""
    ids = [str(i) for i in ray.get_gpu_ids()] if ray.is_initialized() else []
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        uuid = str(getattr(props, "uuid", ""))
        gpu = f"{props.name} #{','.join(ids) or '0'}" + (f" ({uuid})" if uuid else "")
    else:   # a logical GPU without CUDA is still an identity of its own
        gpu = f"cpu (Ray GPU {','.join(ids)})" if ids else f"cpu (actor {slot})"
    where = ", ".join(p for p in (ip, f"node {node_id[:8]}" if node_id else "") if p)
    host = socket.gethostname()
    return {"node": f"{host} ({where})" if where else host, "node_id": node_id, "gpu": gpu, "gpu_ids": ids,
            "cuda": torch.cuda.is_available(), "pid": os.getpid(), "slot": slot}


def process_started_at() -> float | None:
    """This process's start, wall clock (from /proc; None elsewhere): with the import and __init__ times it
    splits an actor's start into Ray's worker launch, the imports and the set-up."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])   # finer than btime
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _node_gpus(node_id: str) -> float:
    """GPUs on this actor's node, from Ray's view of the cluster (0 when unknown)."""
    return next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == node_id), 0.0) \
        if node_id else 0.0


def compile_share(node_id: str, gpu_share: float = 1.0) -> int:
    """CPU threads for this actor's compile workers: the node's CPUs shared between its GPU actors, one per
    gpu_share of each GPU (Ray starts workers with OMP_NUM_THREADS=1, the actor's CPU reservation; host-side
    compiles need more)."""
    gpus = _node_gpus(node_id) or torch.cuda.device_count()
    actors = max(1, round(int(gpus) / gpu_share)) if 0 < gpu_share else max(1, int(gpus))
    return max(2, (os.cpu_count() or 2) // actors)


def start_warm_up(node_id: str, mode: str, gpu_share: float = 1.0) -> WarmUp | None:
    """A GPU actor's warm-up (aitune_ray.runtime.warm_up), started on a thread of its own with the actor's share of
    the node's CPUs for its compile workers; None on an actor without CUDA."""
    if not torch.cuda.is_available():
        return None
    warm = WarmUp(compile_share(node_id, gpu_share), mode)
    warm.start()
    return warm
