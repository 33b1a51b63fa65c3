"""DriverGpu: where the driver stands with the cluster's GPUs: the device to tune for, whether the actors see
CUDA, whether this driver's own GPU is the pool's (then it may time eager itself, and actors take turns with
it). A mixin of RayExecutor (aitune_ray.cluster.ray_executor).
"""

from __future__ import annotations

import logging

import ray
import torch

from aitune_ray.cluster.session import tensors_of_sample
from aitune_ray.runtime.device import parse_device
from aitune_ray.errors import DeviceError
from aitune_ray.worker.seam import TuneContext
from aitune_ray.measure.turns import shares_gpu

logger = logging.getLogger(__name__)


class DriverGpu:
    def resolve_device(self, device) -> torch.device:
        """cpu or cuda, judged by the cluster's GPUs rather than this machine's. None: cuda when the cluster
        has GPUs and the actors see CUDA (logical GPUs without CUDA, as in CPU tests, mean cpu). A cuda
        index is dropped: each actor uses its own GPU. On a Ray this executor is starting here, the answer
        does not wait for it: that Ray has this process's GPUs."""
        self.open()
        starting = self._local and self._pool is None
        gpus = self._local_gpus if starting else ray.cluster_resources().get("GPU", 0.0)
        if device is None:
            if gpus > 0 and not self._actors_see_cuda():
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

    def _actors_see_cuda(self) -> bool:
        """Whether the actors see a CUDA device. On the Ray this executor started on this machine, or on a
        cluster whose GPUs are all on this driver's node (`ray job submit` to a one-machine cluster), the GPU
        actors are this machine's processes: they do when this one does, and nobody waits for an actor to
        start (the driver builds its model, records, times eager and profiles meanwhile). Elsewhere the first
        actor to start says."""
        if torch.cuda.is_available() and (self._local or self._driver_has_the_gpu()):
            return True
        return self._actors_have_cuda()

    def _actors_have_cuda(self, timeout_s: float = 300.0) -> bool:
        """Whether the first actor to start sees a CUDA device (True when none answers in time)."""
        refs = [s.ready_ref for s in self.pool.alive() if s.ready_ref is not None]
        if not refs:
            return True
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        try:
            return bool(ray.get(done[0]).get("cuda")) if done else True
        except ray.exceptions.RayError:
            return True

    def _driver_times(self, context: TuneContext) -> bool:
        """Whether this driver may time eager itself: on a machine of one GPU where it started Ray (or that
        is the whole cluster and runs the driver, see _driver_has_the_gpu), with the
        module and its samples already on that GPU (no second copy of the weights), for a strategy that
        re-measures eager beside its finalists before it decides (see submit_early). Eager is then timed
        while the tuner actor is still starting, instead of after it: its start leaves the critical path.
        On several GPUs one actor times it, while the others build. The actors of the one GPU take turns there
        (actors_share_gpus), so they wait for the driver's timing: it takes a timing's turn there
        (aitune_ray.measure.turns)."""
        if torch.device(context.device).type != "cuda" or not torch.cuda.is_available():
            return False
        if not self._on_one_gpu() or not self._driver_has_the_gpu():
            return False
        tensors = [*context.module.parameters(), *context.module.buffers(),
                   *(t for sample in context.samples for t in tensors_of_sample(sample))]
        return all(t.device.type == "cuda" for t in tensors)

    def _driver_has_the_gpu(self) -> bool:
        """Whether the cluster's GPUs are this driver's: a Ray started here, or a cluster whose GPUs are all
        on the driver's node (`ray job submit` to a one-GPU machine, where the job's driver runs beside
        the actors)."""
        if self._local:
            return True
        try:
            gpus = ray.cluster_resources().get("GPU", 0.0)
            here = ray.get_runtime_context().get_node_id()
            mine = next((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == here and n["Alive"]),
                        0.0)
        except Exception as exc:   # an older or partial Ray: the actors time eager, as on a cluster
            logger.debug("where the cluster's GPUs are is not known: %s", exc)
            return False
        return 0 < gpus <= mine + 1e-9

    def _on_one_gpu(self, actors: int | None = None) -> bool:
        """Whether every actor of the pool (or of a pool of that many actors) is on one and the same GPU (one
        actor, or several sharing it)."""
        actors = self._actors() if actors is None else actors
        return self.gpus_per_actor > 0 and actors * self.gpus_per_actor <= 1 + 1e-9

    def actors_share_gpus(self) -> bool:
        """Whether the actors share their GPUs, with each other (gpus_per_actor below 1) or with this driver,
        which times eager and profiles on the one GPU of a pool of whole-GPU actors (_driver_uses_the_gpu):
        the actors then take turns there, and so do the driver's timings and profiles."""
        return shares_gpu(self.gpus_per_actor) or self._driver_turns

    def _driver_uses_the_gpu(self, size: int) -> bool:
        """Whether a pool of size actors, on the cluster this driver joined, is on one GPU that this driver,
        which has CUDA, uses too: a cluster whose one GPU is on the driver's node (`ray job submit` to a
        one-GPU machine). A Ray started here: this machine has one GPU (open())."""
        return torch.cuda.is_available() and self._on_one_gpu(size) and self._driver_has_the_gpu()
