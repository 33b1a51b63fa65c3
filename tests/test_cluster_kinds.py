"""A cluster of several GPU kinds (ray.cluster_utils.Cluster, fake GPUs, each node labelled with its kind):
a job that targets one kind runs only on nodes of that kind, and one whose kind is absent is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import aitune_ray as ait
from aitune_ray.cluster import kinds
from aitune_ray.errors import ClusterError
from aitune_ray.inspection import inspect_checkpoint, render
from aitune_ray.measure.timing import MeasureConfig
from tests.ray_helpers import FastBackend, HelperConfig, SlowNet

ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)


def recorded(name: str, strategy) -> ait.Module:
    module = ait.Module(SlowNet(), name=name, strategy=strategy)
    with torch.no_grad():
        for bs in (1, 4):
            module(torch.randn(bs, 8))
    return module


@pytest.mark.slow
def test_work_lands_only_on_nodes_of_the_target_kind(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("PYTHONPATH", WORKER_PATH)   # the raylets' workers import this checkout
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    labels = ["H100", "A100", "H100"]
    nodes = [cluster.add_node(num_cpus=1, num_gpus=1, resources={f"accelerator_type:{kind}": 1}) for kind in labels]
    h100 = {n.node_id[:8] for n, kind in zip(nodes, labels) if kind == "H100"}
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        with pytest.raises(ClusterError, match=r"gpu_kind 'V100'.*GPU kinds there: A100, H100"):
            ait.RayExecutor(gpu_kind="V100", warm_up="off").open()
        executor = ait.RayExecutor(gpu_kind="H100", task_timeout_s=120, remeasure_rounds=3, warm_up="off",
                                   log_dir=str(tmp_path / "logs"))
        events: list[dict] = []
        executor.progress = events.append
        try:
            module = recorded("net", ait.MaxThroughputStrategy([FastBackend(HelperConfig(tag=i)) for i in range(4)],
                                                               measure_config=MEASURE))
            report = module.tune(executor=executor)
            assert len(executor.pool.slots) == 2                  # one actor per H100 node's GPU
        finally:
            executor.close()
        assert all(r.ok for r in report.results)
        assert {r.node.rpartition("node ")[2].rstrip(")") for r in report.results} <= h100
        placed = {e["node"].rpartition("node ")[2].rstrip(")") for e in events if e["node"]}
        assert placed and placed <= h100                          # builds, baseline and re-measure alike
        path = ait.save(module, tmp_path / "net.ait")
        (entry,) = inspect_checkpoint(path)["modules"]
        assert entry["gpu_kind"] == "H100"                        # the kind this decision is for
        assert "tuned on cpu (H100)" in render(inspect_checkpoint(path))
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_kind_is_a_custom_label_where_nodes_carry_it_else_ray_s_accelerator_type():
    nodes = [{"Alive": True, "Resources": {"GPU": 2.0, "CPU": 8.0, "accelerator_type:H100": 1.0}},
             {"Alive": True, "Resources": {"GPU": 4.0, "CPU": 16.0, "gpu-l4": 1.0}},
             {"Alive": False, "Resources": {"GPU": 8.0, "CPU": 8.0, "accelerator_type:H100": 1.0}}]
    assert kinds.capacity("H100", nodes) == ("accelerator_type:H100", 2.0, 8.0)   # the dead node left out
    assert kinds.capacity("gpu-l4", nodes) == ("gpu-l4", 4.0, 16.0)
    assert kinds.capacity(None, nodes) == (None, 6.0, 24.0)
    with pytest.raises(ClusterError, match="no live node .* 'accelerator_type:A100'.*kinds there: H100"):
        kinds.capacity("A100", nodes)
