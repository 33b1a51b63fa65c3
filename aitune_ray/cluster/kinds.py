"""GPU kinds on a heterogeneous Ray cluster: which nodes a job that targets one kind may use.

A kind is named as Ray's accelerator type ("H100": the node resource ``accelerator_type:H100`` that Ray sets
on a node whose GPUs it detected, or that a node was started with) or as a custom resource label that the
nodes of that kind were started with (``ray start --resources '{"gpu-h100": 1}'``). Every tuner actor asks
for a sliver of that resource, so Ray places it only on such a node; timings are then never taken on, or
compared with, another kind.
"""

from __future__ import annotations

from aitune_ray.errors import ClusterError

ACCELERATOR = "accelerator_type:"
SLIVER = 0.001   # what each actor asks of the kind's resource (a node has 1 of it)


def kind_resource(kind: str, nodes: list[dict]) -> str:
    """The resource that marks nodes of kind: a custom label some node has, else accelerator_type:<kind>."""
    if any(kind in node.get("Resources", {}) for node in nodes):
        return kind
    return kind if kind.startswith(ACCELERATOR) else ACCELERATOR + kind


def kinds_present(nodes: list[dict]) -> list[str]:
    """The accelerator types of the cluster's live nodes."""
    return sorted({key[len(ACCELERATOR):] for node in nodes if node.get("Alive")
                   for key in node.get("Resources", {}) if key.startswith(ACCELERATOR)})


def capacity(kind: str | None, nodes: list[dict]) -> tuple[str | None, float, float]:
    """(the kind's resource, its nodes' GPUs, their CPUs); kind None: the whole cluster's. A kind with no live
    node of GPUs is a ClusterError naming the kinds there are."""
    alive = [n for n in nodes if n.get("Alive")]
    if kind is None:
        return (None, sum(n["Resources"].get("GPU", 0.0) for n in alive),
                sum(n["Resources"].get("CPU", 0.0) for n in alive))
    resource = kind_resource(kind, alive)
    mine = [n for n in alive if resource in n.get("Resources", {})]
    gpus = sum(n["Resources"].get("GPU", 0.0) for n in mine)
    if gpus <= 0:
        there = ", ".join(kinds_present(alive)) or "none"
        raise ClusterError(f"gpu_kind {kind!r}: no live node of the Ray cluster has GPUs of that kind (no node "
                           f"with the resource {resource!r}); GPU kinds there: {there}")
    return resource, gpus, sum(n["Resources"].get("CPU", 0.0) for n in mine)
