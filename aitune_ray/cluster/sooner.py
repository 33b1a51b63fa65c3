"""A local Ray's start, sooner: ray.init() of a new single-node Ray waits on two things in turn that need not
be waited for in turn.

- Its API server (a Python process that imports Ray's dashboard modules, 1.6 to 1.8 s on an H200 machine)
  is started, and waited for, before the node's own processes (raylet and its agents) start. Here it starts
  on a thread of its own, beside them. ray.init() does not use it; sooner() waits for its start on leaving.
- The wait for the node to register asks once and then sleeps a whole second between asks (2.0 s on the
  H200 machine). Here the node table is asked every POLL_S first.

On a 2-core CPU machine, with the driver's main thread busy meanwhile, ray.init() took 2.6 to 3.3 s with
both against 3.8 to 5.4 s without. These are Ray's internals (ray._private): any part not found as
expected, or failing, is left as Ray does it.

A process Ray starts shares the fate of the thread that started it (PR_SET_PDEATHSIG follows the thread):
the API server's thread stays, idle, until `released` is set, after ray.shutdown() (as
aitune_ray.cluster.starting.Background does for the thread that calls ray.init()).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

logger = logging.getLogger(__name__)

POLL_S = 0.02          # between asks for the node table
REGISTER_S = 30.0      # then Ray's own wait takes over
API_SERVER_S = 60.0    # the longest sooner() waits on leaving for the API server's start


@contextlib.contextmanager
def sooner(released: threading.Event) -> Iterator[None]:
    """Within: ray.init() on this thread starts a local Ray sooner (see the module). On leaving, the API
    server's start has ended (or API_SERVER_S passed) and Ray's functions are its own again."""
    try:
        from ray._private import node as ray_node
        from ray._private import services
    except ImportError as exc:
        logger.debug("Ray's start as Ray does it: %s", exc)
        yield
        return
    real_api, real_get_node = getattr(ray_node.Node, "start_api_server", None), getattr(services, "get_node", None)
    started: list[threading.Event] = []

    def api_server_beside(node, *args, **kwargs):
        done = threading.Event()

        def run():
            try:
                real_api(node, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - Ray only warns of a failed API server start, as here
                logger.warning("Ray's API server did not start: %s: %s", type(exc).__name__, exc)
            finally:
                done.set()
            released.wait()   # the API server's process lives as long as this thread

        started.append(done)
        threading.Thread(target=run, name="aitune-ray-api-server", daemon=True).start()

    def get_node_polled(gcs_address, node_id):
        _wait_registered(gcs_address, node_id)
        return real_get_node(gcs_address, node_id)

    if real_api is not None:
        ray_node.Node.start_api_server = api_server_beside
    if real_get_node is not None:
        services.get_node = get_node_polled
    try:
        yield
    finally:
        if real_api is not None:
            ray_node.Node.start_api_server = real_api
        if real_get_node is not None:
            services.get_node = real_get_node
        for done in started:
            if not done.wait(API_SERVER_S):
                logger.warning("Ray's API server had not started after %.0f s", API_SERVER_S)


def _wait_registered(gcs_address, node_id) -> None:
    """Until the node node_id is alive in the node table of the GCS at gcs_address (or REGISTER_S passed, or
    the table cannot be read)."""
    try:
        from ray._private import services, state
        table = state.GlobalState()
        table._initialize_global_state(services._get_gcs_client_options(gcs_address))
    except Exception as exc:  # noqa: BLE001 - Ray's own wait follows
        logger.debug("the node's registration is waited for as Ray does: %s", exc)
        return
    try:
        deadline = time.monotonic() + REGISTER_S
        while time.monotonic() < deadline:
            if any(n.get("NodeID") == node_id and n.get("Alive") for n in table.node_table()):
                return
            time.sleep(POLL_S)
    except Exception as exc:  # noqa: BLE001 - Ray's own wait follows
        logger.debug("the node table could not be read: %s", exc)
    finally:
        with contextlib.suppress(Exception):
            table.disconnect()
