"""aitune-ray doctor on a Ray cluster: aitune_ray.executors.doctor.machine_report() run once on every alive node.

Each report runs as a task pinned to its node that reserves no GPU, with Ray told not to hide the node's
GPUs from it, so it sees what a tuner actor there would see without waiting for a busy GPU.
"""

from __future__ import annotations

import logging

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from aitune_ray.executors.doctor import machine_report

logger = logging.getLogger(__name__)

SEE_ALL_GPUS = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}


def _report(ray_gpus: float) -> dict:
    return machine_report(ray_gpus=ray_gpus)


def cluster_reports(address: str | None = None, timeout_s: float = 300.0) -> list[dict]:
    """One machine report per alive node of the cluster at address (None: the Ray already initialized)."""
    started = False
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
        started = True
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        task = ray.remote(_report)
        refs = {}
        for node in nodes:
            gpus = float(node.get("Resources", {}).get("GPU", 0.0))
            refs[node["NodeID"]] = task.options(
                num_cpus=0, num_gpus=0, name=f"doctor {node.get('NodeManagerAddress', '')}",
                runtime_env={"env_vars": SEE_ALL_GPUS},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(gpus)
        rows = []
        for node in nodes:
            try:
                row = ray.get(refs[node["NodeID"]], timeout=timeout_s)
            except ray.exceptions.RayError as exc:
                row = {"node": node.get("NodeManagerAddress", node["NodeID"]), "error": str(exc)[:300],
                       "can_run": False}
            row["ray_node"] = node.get("NodeManagerAddress", "")
            row["node_id"] = node["NodeID"]
            rows.append(row)
        return rows
    finally:
        if started:
            ray.shutdown()
