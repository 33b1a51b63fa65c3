"""Tuner actors of a local Ray that start in worker processes Ray launched ahead of them.

Ray launches a worker process for an actor only once the actor is created, after ray.init() has returned.
That process then starts Python and Ray's worker, and the actor's class import brings in torch: on an H200
machine, the actor answered 4.5 to 6 s after its creation. A RayExecutor that starts Ray on this machine
knows before Ray is up how many actors its first wave has (one per GPU). So it has Ray launch that many
workers as soon as its driver registers, still within ray.init() (Ray's `prestart_worker_first_driver`),
and has each import torch and the tuner actor's module before it takes work (Ray's
`preload_python_modules`). An actor created then finds a worker launched, its imports under way or done.

Ray prestarts one worker per CPU when asked. On a machine of many CPUs, that many processes importing torch
would compete with the driver's recording and the actors' own start, so capped() sets the count in the
raylet's command line. That is a Ray internal (ray._private.services, ray 2.60): where it is not found,
nothing is prestarted (system_config).

GPU assignment is unchanged: neither import makes a CUDA call, so Ray still sets an actor's
CUDA_VISIBLE_DEVICES before its process first uses CUDA (a GPU test checks that these imports do not load
the CUDA driver).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Iterator

logger = logging.getLogger(__name__)

FLAG = "--num_prestart_python_workers="
PRELOAD = ("torch", "actors.tuner")


def supported() -> bool:
    """Whether the raylet's prestart count can be set here (capped())."""
    try:
        from ray._private import services

        return callable(getattr(services, "start_ray_process", None)) and FLAG in inspect.getsource(
            services.start_raylet)
    except Exception as exc:  # noqa: BLE001 - then no worker is prestarted
        logger.debug("Ray's raylet command could not be read: %s", exc)
        return False


def system_config(workers: int) -> dict:
    """The _system_config entries of a local ray.init() whose raylet is started within capped(workers):
    that many workers launched when the driver registers, each with PRELOAD imported; none at all where
    workers is 0 or the count cannot be capped."""
    on = workers > 0 and supported()
    config = {"prestart_worker_first_driver": on, "enable_worker_prestart": False}
    if on:
        config["preload_python_modules"] = list(PRELOAD)
    return config


@contextlib.contextmanager
def capped(workers: int) -> Iterator[None]:
    """Within: a raylet started from this process prestarts at most `workers` Python workers (instead of
    one per CPU) when its first driver registers."""
    try:
        from ray._private import ray_constants, services
    except ImportError:
        yield
        return
    real = services.start_ray_process

    def start(command, process_type, *args, **kwargs):
        if process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [f"{FLAG}{workers}" if str(part).startswith(FLAG) else part for part in command]
        return real(command, process_type, *args, **kwargs)

    services.start_ray_process = start
    try:
        yield
    finally:
        services.start_ray_process = real
