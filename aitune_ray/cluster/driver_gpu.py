"""DriverGpu: where the driver stands with the cluster's GPUs: the device to tune for, whether the actors see
CUDA, whether this driver may time eager itself on the pool's one GPU. A part of RayExecutor
(aitune_ray.cluster.ray_executor), made from the executor's RaySession, which it asks about the pool.
"""

from __future__ import annotations

import logging

import ray
import torch

from aitune_ray.cluster.session import RaySession, tensors_of_sample
from aitune_ray.runtime.device import parse_device
from aitune_ray.errors import DeviceError
from aitune_ray.worker.seam import TuneContext

logger = logging.getLogger(__name__)


class DriverGpu:
    """The driver's GPU beside the pool of session."""

    def __init__(self, session: RaySession):
        self.session = session

    def resolve_device(self, device) -> torch.device:
        """cpu or cuda, judged by the cluster's GPUs rather than this machine's. None: cuda when the cluster
        has GPUs and the actors see CUDA (logical GPUs without CUDA, as in CPU tests, mean cpu). A cuda
        index is dropped: each actor uses its own GPU. On a Ray the session is starting here, the answer
        does not wait for it: that Ray has this process's GPUs."""
        session = self.session
        session.open()
        starting = session.local and not session.made
        gpus = session.local_gpus if starting else ray.cluster_resources().get("GPU", 0.0)
        if device is None:
            if gpus > 0 and not self.actors_see_cuda():
                logger.info("the cluster's %g GPU(s) have no CUDA device in the actors: tuning for cpu", gpus)
                return torch.device("cpu")
            return torch.device("cuda" if gpus > 0 else "cpu")
        dev = parse_device(device)
        if dev.type == "cpu":
            return dev
        if gpus <= 0:
            raise DeviceError(f"device {device!r} was asked for, but the Ray cluster has no GPU")
        if dev.index is not None:
            logger.info("device %s: on Ray every actor uses its own GPU; the index is ignored", dev)
        return torch.device("cuda")

    def actors_see_cuda(self) -> bool:
        """Whether the actors see a CUDA device. On the Ray the session started on this machine, or on a
        cluster whose GPUs are all on this driver's node (`ray job submit` to a one-machine cluster), the GPU
        actors are this machine's processes: they do when this one does, and nobody waits for an actor to
        start (the driver builds its model, records, times eager and profiles meanwhile). Elsewhere the first
        actor to start says."""
        if torch.cuda.is_available() and (self.session.local or self.session.driver_has_the_gpu()):
            return True
        return self.actors_have_cuda()

    def actors_have_cuda(self, timeout_s: float = 300.0) -> bool:
        """Whether the first actor to start sees a CUDA device (True when none answers in time)."""
        refs = [s.ready_ref for s in self.session.pool.alive() if s.ready_ref is not None]
        if not refs:
            return True
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        try:
            return bool(ray.get(done[0]).get("cuda")) if done else True
        except ray.exceptions.RayError:
            return True

    def times(self, context: TuneContext) -> bool:
        """Whether this driver may time eager itself: on a machine of one GPU where it started Ray (or that
        is the whole cluster and runs the driver, see RaySession.driver_has_the_gpu), with the
        module and its samples already on that GPU (no second copy of the weights), for a strategy that
        re-measures eager beside its finalists before it decides (see RayExecutor.submit_early). Eager is then
        timed while the tuner actor is still starting, instead of after it: its start leaves the critical path.
        On several GPUs one actor times it, while the others build. The actors of the one GPU take turns there
        (RaySession.actors_share_gpus), so they wait for the driver's timing: it takes a timing's turn there
        (aitune_ray.measure.turns)."""
        if torch.device(context.device).type != "cuda" or not torch.cuda.is_available():
            return False
        if not self.session.on_one_gpu() or not self.session.driver_has_the_gpu():
            return False
        tensors = [*context.module.parameters(), *context.module.buffers(),
                   *(t for sample in context.samples for t in tensors_of_sample(sample))]
        return all(t.device.type == "cuda" for t in tensors)
