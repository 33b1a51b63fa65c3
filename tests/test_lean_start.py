"""A local Ray started for one job without Ray's API server, its node's registration noticed within 20 ms
(aitune_ray.cluster.lean_start); a node that does not register is taken down and Ray started in its own way."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")

from aitune_ray.cluster import RayExecutor, lean_start  # noqa: E402

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
NODE_ID = "ab" * 28   # a node id as Ray writes it: 28 bytes in hex


def _processes() -> dict:
    return ray._private.worker._global_node.all_processes


def test_a_local_start_leaves_the_api_server_out_and_its_actor_answers(monkeypatch):
    from ray._private import node as ray_node

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # On busy CI cores the node may take long to register; this test is about the API server, not the deadline
    monkeypatch.setattr(lean_start, "REGISTER_S", 300.0)
    api = ray_node.Node.start_api_server
    executor = RayExecutor(max_actors=1)
    try:
        executor.open()
        pool = executor.pool   # waits for the start
        assert executor.started_lean is True
        assert "dashboard" not in _processes() and "raylet" in _processes()
        info = ray.get(pool.slots[0].ready_ref, timeout=120)
        assert info["pid"] != os.getpid()
        assert ray_node.Node.start_api_server is api   # Ray's own again once the start is over
    finally:
        executor.close()
    assert not ray.is_initialized()


def test_a_node_that_does_not_register_is_taken_down_and_ray_starts_in_its_own_order(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    first: list = []

    def never(node):   # the node's processes are up; its registration is not waited for
        first.append([info.process for infos in node.all_processes.values() for info in infos])
        raise lean_start.NotRegistered("its node had not registered after 0 s")

    monkeypatch.setattr(lean_start, "wait_registered", never)
    executor = RayExecutor(max_actors=1)
    try:
        executor.open()
        pool = executor.pool
        assert executor.started_lean is False and len(first) == 1
        names = {os.path.basename(str(p.args[0])) for p in first[0]}
        assert any("raylet" in n for n in names) and any("gcs_server" in n for n in names), names
        assert all(process.poll() is not None for process in first[0])   # the first start's processes
        assert "dashboard" in _processes()                                     # Ray's own order this time
        assert ray.get(pool.slots[0].ready_ref, timeout=120)["pid"] != os.getpid()
    finally:
        executor.close()
    assert not ray.is_initialized()


class _Client:
    """A GCS client whose node table has the node from the given ask on (None: never); raises when told."""

    def __init__(self, alive_from: int | None, error: Exception | None = None):
        self.alive_from, self.error, self.asks = alive_from, error, 0

    def get_all_node_info(self, timeout, node_selectors, state_filter):
        self.asks += 1
        if self.error is not None:
            raise self.error
        assert len(node_selectors) == 1
        return {NODE_ID: object()} if self.alive_from is not None and self.asks >= self.alive_from else {}


class _Node:
    node_id = NODE_ID

    def __init__(self, client: _Client):
        self.client = client

    def get_gcs_client(self):
        return self.client


def test_the_wait_asks_until_the_node_is_alive(monkeypatch):
    monkeypatch.setattr(lean_start, "POLL_S", 0.0)
    client = _Client(alive_from=3)
    lean_start.wait_registered(_Node(client))
    assert client.asks == 3


def test_a_node_that_never_registers_raises_and_a_table_that_cannot_be_read_leaves_the_wait_to_ray(monkeypatch):
    monkeypatch.setattr(lean_start, "POLL_S", 0.0)
    monkeypatch.setattr(lean_start, "REGISTER_S", 0.0)
    with pytest.raises(lean_start.NotRegistered, match="had not registered"):
        lean_start.wait_registered(_Node(_Client(alive_from=None)))
    broken = _Client(alive_from=None, error=RuntimeError("GCS moved"))
    lean_start.wait_registered(_Node(broken))   # returns: Ray's own wait for the node follows
    assert broken.asks == 1


def test_another_failure_of_ray_init_is_raised_as_it_is():
    calls = []

    def init():
        calls.append(1)
        raise RuntimeError("no room for the object store")

    with pytest.raises(RuntimeError, match="no room"):
        lean_start.start(init)
    assert calls == [1]   # not started a second time
    assert lean_start.start(lambda: None) is False   # an init that started no node (it joined one) was not lean
