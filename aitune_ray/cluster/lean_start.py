"""A local Ray for one tuning job, started without two waits of ray.init() that such a job has no use for.

- **Ray's API server** (a Python process that serves the dashboard, job submission and the state API) is
  started, and waited for, before the node's own processes: 1.6 to 1.8 s on an H200 machine, about 1 s on a
  2-core CPU machine. The Ray a RayExecutor starts for one job serves none of these (it is started with
  include_dashboard=False, and only this driver uses it), so the server is left out. To watch a job in
  Ray's dashboard, start a Ray head (`ray start --head`) and give the executor its address.
- **The wait for the node to register** asks once and then sleeps a whole second between asks. Here the
  node's own GCS client asks every POLL_S first, so the start goes on as soon as the node is there.

These are Ray's internals (ray._private, ray 2.60): a part not found as expected is left as Ray does it.
A node that has not registered after REGISTER_S is taken down again, and Ray is started once more in its
own way (start()).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable, Iterator

logger = logging.getLogger(__name__)

POLL_S = 0.02        # between asks for the node
REGISTER_S = 15.0    # then the lean start is given up (Ray's own wait is 30 s)


class NotRegistered(RuntimeError):
    """The node of a lean start did not register in time."""


def start(init: Callable[[], object]) -> bool:
    """Run init (a ray.init() that starts a new local Ray) the lean way. When the node does not register,
    its processes are stopped and init runs again as Ray does it. Returns whether a node was started the
    lean way (not when init joined a running Ray instead). Any other failure of init is raised as it is."""
    nodes: list = []
    try:
        with lean(nodes):
            init()
        return bool(nodes)
    except NotRegistered as exc:
        logger.warning("Ray did not come up without its API server (%s): starting it again as Ray does", exc)
        _take_down(nodes)
        init()
        return False


@contextlib.contextmanager
def lean(nodes: list | None = None) -> Iterator[None]:
    """Within: a ray.init() on this thread that starts a new local Ray leaves its API server out and notices
    its node's registration within POLL_S. nodes: gets each ray._private.node.Node whose processes start."""
    try:
        from ray._private import node as ray_node
    except ImportError as exc:
        logger.debug("Ray's start as Ray does it: %s", exc)
        yield
        return
    real_api = getattr(ray_node.Node, "start_api_server", None)
    real_processes = getattr(ray_node.Node, "start_ray_processes", None)
    seen = nodes if nodes is not None else []

    def no_api_server(node, *args, **kwargs):
        logger.debug("Ray's API server left out of this job's own Ray")

    def processes_then_registered(node, *args, **kwargs):
        seen.append(node)
        real_processes(node, *args, **kwargs)
        wait_registered(node)

    if real_api is not None:
        ray_node.Node.start_api_server = no_api_server
    if real_processes is not None:
        ray_node.Node.start_ray_processes = processes_then_registered
    try:
        yield
    finally:
        if real_api is not None:
            ray_node.Node.start_api_server = real_api
        if real_processes is not None:
            ray_node.Node.start_ray_processes = real_processes


def wait_registered(node) -> None:
    """Until node (a ray._private.node.Node whose processes have started) is alive in its GCS's node table.
    Raises NotRegistered after REGISTER_S; returns at once where the table cannot be asked this way (Ray's
    own wait follows)."""
    try:
        from ray._raylet import NodeID
        from ray.core.generated.gcs_pb2 import GcsNodeInfo
        from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

        client = node.get_gcs_client()
        selectors = [GetAllNodeInfoRequest.NodeSelector(node_id=NodeID.from_hex(node.node_id).binary())]
        alive = GcsNodeInfo.GcsNodeState.ALIVE
    except Exception as exc:  # noqa: BLE001 - Ray's own wait follows
        logger.debug("the node's registration is waited for as Ray does: %s", exc)
        return
    deadline = time.monotonic() + REGISTER_S
    while True:
        try:
            if client.get_all_node_info(timeout=1, node_selectors=selectors, state_filter=alive):
                return
        except Exception as exc:  # noqa: BLE001 - Ray's own wait follows
            logger.debug("the node table could not be read: %s", exc)
            return
        if time.monotonic() > deadline:
            raise NotRegistered(f"its node had not registered after {REGISTER_S:.0f} s")
        time.sleep(POLL_S)


def _take_down(nodes: list) -> None:
    """Stop the processes of the nodes a lean start began (Ray never took them as its own)."""
    import ray

    for node in nodes:
        try:
            node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
        except Exception as exc:  # noqa: BLE001 - they go with the starting thread at the latest
            logger.warning("the processes of Ray's first start could not all be stopped: %s", exc)
    if ray.is_initialized():
        ray.shutdown()
