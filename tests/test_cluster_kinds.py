"""A cluster of several GPU kinds (ray.cluster_utils.Cluster, fake GPUs, each node labelled with its kind):
a job that targets one kind runs only on nodes of that kind, and one whose kind is absent is refused; a node
of that kind removed mid-job costs its in-flight task only, which runs again on another node of the kind; a
node of that kind that joins mid-job gets the job's queued work."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import aitune_ray as ait
from aitune_ray.cluster import kinds
from aitune_ray.errors import ClusterError
from aitune_ray.checkpoint.inspection import inspect_checkpoint, render
from aitune_ray.measure.timing import MeasureConfig
from tests.fault_helpers import GateConfig, GatedBackend, start_gate
from tests.ray_helpers import FastBackend, HelperConfig, recorded

ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)


def three_kinds(monkeypatch):
    """A test cluster: a CPU-only head, then H100, A100 and H100 nodes of one fake GPU each, labelled by kind.
    Returns (cluster, the three nodes, the H100 nodes' short ids)."""
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("PYTHONPATH", WORKER_PATH)   # the raylets' workers import this checkout
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    labels = ["H100", "A100", "H100"]
    nodes = [cluster.add_node(num_cpus=1, num_gpus=1, resources={f"accelerator_type:{kind}": 1}) for kind in labels]
    return cluster, nodes, {n.node_id[:8] for n, kind in zip(nodes, labels) if kind == "H100"}


@pytest.mark.slow
def test_work_lands_only_on_nodes_of_the_target_kind(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    cluster, nodes, h100 = three_kinds(monkeypatch)
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


def node_of(where: str) -> str:
    """The short node id in a result's or an event's node ("host (address, node 1a2b3c4d)")."""
    return where.rpartition("node ")[2].rstrip(")")


@pytest.mark.slow
def test_a_node_of_the_target_kind_that_joins_mid_job_gets_queued_work(tmp_path, monkeypatch):
    """One H100 node (and an A100 one): its one actor holds a gated build while another waits in the queue.
    An H100 node joins: the pool grows onto it and the waiting build runs there before the gate opens."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("PYTHONPATH", WORKER_PATH)   # the raylets' workers import this checkout
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    first = cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:H100": 1})
    cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:A100": 1})
    joined, landed, events = [], threading.Event(), []   # landed: the queued build started on another node

    def progress(event: dict) -> None:
        events.append(event)
        if (event["event"] == "building" and event["backend"] == "FastBackend"
                and node_of(event["node"]) != first.node_id[:8]):
            landed.set()

    try:
        ray.init(address=cluster.address, log_to_driver=False)
        gate = start_gate("join")
        executor = ait.RayExecutor(gpu_kind="H100", task_timeout_s=120, remeasure_rounds=3, warm_up="off",
                                   log_dir=str(tmp_path / "logs"), progress=progress)
        module = recorded("net", ait.MaxThroughputStrategy([
            GatedBackend(GateConfig(tag=1, gate="join", at="build")), FastBackend(HelperConfig(tag=2))],
            measure_config=MEASURE))
        out: list = []
        tuner = threading.Thread(target=lambda: out.append(module.tune(executor=executor)), daemon=True)
        tuner.start()   # (a node is added from the main thread: Ray's Cluster starts its processes there)
        try:
            ray.get(gate.wait_arrived.remote(), timeout=300)   # the one H100 actor holds the gated build
            joined.append(cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:H100": 1}))
            landed.wait(120)                      # the queued build starts on the new node (or the test fails)
        finally:
            ray.get(gate.release.remote())
            tuner.join(300)
        try:
            (report,) = out
            slots = len(executor.pool.slots)
        finally:
            executor.close()
        assert landed.is_set() and slots == 2                     # the pool grew by the joined node's GPU
        by_tag = {r.spec["config"]["tag"]: r for r in report.results}
        assert all(r.ok for r in by_tag.values())
        assert node_of(by_tag[2].node) == joined[0].node_id[:8]
        assert node_of(by_tag[1].node) == first.node_id[:8]
        h100 = {first.node_id[:8], joined[0].node_id[:8]}
        assert {node_of(e["node"]) for e in events if e["node"]} <= h100   # nothing on the A100 node
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_a_node_of_the_target_kind_removed_mid_job_costs_its_task_which_runs_again_on_that_kind_only(
        tmp_path, monkeypatch):
    """H100, A100 and H100 nodes, a job for H100: the node of the gated build leaves as that build runs; the
    build runs again on the other H100 node (never the A100 one), nothing else runs twice, and the lost
    attempt's actor log is kept."""
    ray = pytest.importorskip("ray")
    cluster, nodes, h100 = three_kinds(monkeypatch)
    events: list[dict] = []
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        gate = start_gate("kind-loss")
        executor = ait.RayExecutor(gpu_kind="H100", task_timeout_s=120, remeasure_rounds=3, warm_up="off",
                                   log_dir=str(tmp_path / "logs"), progress=events.append)
        removed = []

        def remove_the_node():
            _, node_id = ray.get(gate.wait_arrived.remote())
            removed.append(node_id[:8])
            cluster.remove_node(next(n for n in nodes if n.node_id == node_id))
            ray.get(gate.release.remote())

        remover = threading.Thread(target=remove_the_node, daemon=True)
        remover.start()
        module = recorded("net", ait.MaxThroughputStrategy([
            GatedBackend(GateConfig(tag=1, gate="kind-loss", at="build")), FastBackend(HelperConfig(tag=2)),
            FastBackend(HelperConfig(tag=3))], measure_config=MEASURE))
        try:
            report = module.tune(executor=executor)
        finally:
            executor.close()
        remover.join()
        by_tag = {r.spec["config"]["tag"]: r for r in report.results}
        assert all(r.ok for r in by_tag.values()), [(r.backend, r.status, r.error) for r in report.results]
        assert removed[0] in h100 and node_of(by_tag[1].node) == (h100 - set(removed)).pop()
        assert ray.get(gate.builds.remote()) == [1, 1]            # the lost build twice; nothing else again
        requeued = [e for e in events if e["event"] == "queued" and e.get("lost_log")]
        assert [e["backend"] for e in requeued] == ["GatedBackend"] and Path(requeued[0]["lost_log"]).is_file()
        assert {node_of(e["node"]) for e in events if e["node"]} <= h100   # nothing on the A100 node
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


def test_a_worker_lost_with_its_node_is_known_by_ray_s_words_even_before_it_said_where_it_ran():
    """A replacement actor placed on a node that is going away can die before it reports its node: Ray's
    death message alone then says the node went (so its task runs again), and a worker's own death does not."""
    from aitune_ray.cluster.tasks import node_gone

    for words in ("The actor died unexpectedly before finishing this task.\n\tthe actor's node was terminated "
                  "expectedly: received SIGTERM",
                  "The actor died because its node has died. Node Id: 0123abcd",
                  "The actor died unexpectedly.\n\tthe actor's node was preempted: spot instance reclaimed"):
        assert node_gone("", RuntimeError(words))
    assert not node_gone("", RuntimeError("The actor is dead because its worker process has died. Worker exit "
                                          "type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits"))
