"""GPU kinds on a heterogeneous Ray cluster: which nodes a job that targets one kind may use.

A kind is named as Ray's accelerator type ("H100": the node resource ``accelerator_type:H100`` that Ray sets
on a node whose GPUs it detected, or that a node was started with) or as a custom resource label that the
nodes of that kind were started with (``ray start --resources '{"gpu-h100": 1}'``). Every tuner actor asks
for a sliver of that resource, so Ray places it only on such a node; timings are then never taken on, or
compared with, another kind.
"""

from __future__ import annotations

from aitune_ray.errors import GPUKindError

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
        raise GPUKindError(f"gpu_kind {kind!r}: no live node of the Ray cluster has GPUs of that kind (no node "
                           f"with the resource {resource!r}); GPU kinds there: {there}")
    return resource, gpus, sum(n["Resources"].get("CPU", 0.0) for n in mine)


def local_kinds() -> list[str] | None:
    """The GPU kind a Ray started on this machine would give its node (Ray's accelerator type of this
    machine's GPUs): [] without a CUDA GPU, None where Ray cannot tell."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return []
    try:
        from ray._private import accelerators

        kind = accelerators.get_accelerator_manager_for_resource("GPU").get_current_node_accelerator_type()
    except Exception:  # noqa: BLE001 - Ray's own lookup; where it fails, Ray says so when it starts
        return None
    return [kind] if kind else None


def check_before_start(kind: str, address: str | None) -> None:
    """Before a job records anything: a Ray this process has joined has a live node of kind; a Ray to be
    started here (no address) is this machine, so its GPUs must be of that kind. A cluster at an address is
    checked as the executor connects (capacity). GPUKindError otherwise."""
    import sys

    ray = sys.modules.get("ray")   # a Ray this process has joined is imported already; else Ray is not needed
    if ray is not None and ray.is_initialized():
        capacity(kind, ray.nodes())
        return
    if address:
        return
    here = local_kinds()
    if here is None or kind in here or kind.startswith(ACCELERATOR) and kind[len(ACCELERATOR):] in here:
        return
    raise GPUKindError(f"gpu_kind {kind!r}: no Ray cluster address is given, and the Ray started on this machine "
                       f"would have no GPU of that kind (GPU kinds here: {', '.join(here) or 'none'}); give "
                       "--address of a cluster with such nodes, or leave gpu_kind out")
