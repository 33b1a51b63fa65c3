"""How many tuner actors share each GPU when RayExecutor picks (its default, gpus_per_actor=None).

A build is mostly host work: Dynamo's trace, Inductor's lowering and Triton's compiles run on the CPU while
the GPU waits. Two actors on one GPU build side by side and take turns at it for every timing
(aitune_ray.measure.turns), so a batch with more builds than GPUs has its builds done sooner. But each actor
is a process of its own, with its own CUDA context and its own copy of the model, and its compile workers
get half the CPUs they would have alone. So a GPU is shared only when all of these hold:

- the executor started Ray on this machine, so the GPUs are this process's and their memory is known;
- the machine has two GPUs or more. On one GPU the driver times eager and profiles there, its one actor
  takes turns with it (RayExecutor.actors_share_gpus) and so builds beside that profile, with all the
  CPUs; a second actor would halve those and add its own start beside them (on the H200, one actor had
  the builds done as soon or sooner, with half the actor time: benchmarks/README.md);
- the batch has more builds than there are GPUs;
- two actors fit in a GPU's memory beside the driver's own copy of the model: each actor may hold the
  module, its samples and a few builds at once (COPIES times the job's bytes) plus its CUDA context and
  the allocator's slack (ACTOR_BASE_BYTES), within USABLE of the GPU's memory;
- each actor still gets MIN_CPUS_PER_ACTOR CPUs for its compile workers.

Otherwise one actor per GPU. The choice is made once, when Ray is up, from the first batch submitted by
then; a batch that comes later finds one actor per GPU.

Actors that share GPUs start in two waves (start_shares): one per GPU first, the others once those have
answered. Started together, they import torch and Inductor and make their CUDA contexts at the same time,
beside the driver's baseline and kernel-plan profile, and the first build began 7.2 s later on the H200
than with one actor. Ray gives a fractional GPU request the first GPU it fits in, so the first wave asks
a little more than its share (0.501 of a GPU for two per GPU), which no second actor of the wave fits
beside, and the later ones a little less (0.499), which fits the rest of each GPU exactly.
"""

from __future__ import annotations

import dataclasses
import os

import torch

SHARED = 2                       # actors per GPU when the GPU is shared
COPIES = 4                       # the job's bytes an actor may hold at once: module, samples, builds
ACTOR_BASE_BYTES = 2 * 2**30     # an actor's CUDA context, workspaces and the caching allocator's slack
USABLE = 0.8                     # of a GPU's memory
MIN_CPUS_PER_ACTOR = 4           # for an actor's compile workers


@dataclasses.dataclass(frozen=True)
class Layout:
    actors_per_gpu: int
    reason: str

    @property
    def gpus_per_actor(self) -> float:
        return 1.0 / self.actors_per_gpu


def choose(*, job_bytes: int, gpu_bytes: int, gpus: int, cpus: int, builds: int) -> Layout:
    """The actors per GPU for a batch of builds of a job whose module and samples take job_bytes, on gpus
    GPUs of gpu_bytes each (the smallest) and cpus CPUs."""
    if gpus < 1:
        return Layout(1, "no GPU")
    if gpus == 1:
        return Layout(1, "one GPU, which the driver times on too: its actor takes turns with the driver and "
                         "builds beside the driver's baseline and profile, on all the CPUs")
    if builds <= gpus:
        return Layout(1, f"{builds} build(s) for {gpus} GPU(s): one actor per GPU has them all at once")
    actors = SHARED * gpus
    if cpus < MIN_CPUS_PER_ACTOR * actors:
        return Layout(1, f"{cpus} CPUs are too few for {actors} actors' compile workers "
                         f"(at least {MIN_CPUS_PER_ACTOR} each)")
    driver = job_bytes + ACTOR_BASE_BYTES
    need = SHARED * (COPIES * job_bytes + ACTOR_BASE_BYTES)
    room = USABLE * gpu_bytes - driver
    if need > room:
        return Layout(1, f"{SHARED} actors would need about {_gib(need)} beside the driver's {_gib(driver)}, "
                         f"over {USABLE:.0%} of a GPU's {_gib(gpu_bytes)} (the job's tensors take "
                         f"{_gib(job_bytes)})")
    return Layout(SHARED, f"{builds} builds for {gpus} GPU(s), and {SHARED} actors fit in each GPU "
                          f"(about {_gib(need)} of {_gib(gpu_bytes)}): they build side by side and take "
                          "turns for every timing")


def start_shares(size: int, num_gpus: float) -> tuple[list[float], int]:
    """(the GPU share each of size actors asks Ray for, how many of them start at once): for two actors per
    GPU (num_gpus 0.5), one per GPU at once, asking 0.501, then the others, asking 0.499. Every other pool
    starts whole, as asked: with three or more per GPU, no first share that keeps two of the first wave
    off one GPU (over a half) leaves equal shares to the others."""
    if size <= 1 or abs(num_gpus - 0.5) > 1e-9:
        return [num_gpus] * size, size
    gpus = -(-size // 2)
    return [0.501] * gpus + [0.499] * (size - gpus), gpus     # Ray counts GPUs in units of 1/10,000


def tensor_bytes(tensors) -> int:
    """Bytes of the given tensors, each storage counted once."""
    seen, total = set(), 0
    for t in tensors:
        try:
            key = (str(t.device), t.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):   # a tensor without a storage of its own
            key = None
        if key is not None and key[1] and key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def local_gpu_bytes() -> int:
    """The memory of the smallest GPU this process sees (0 without CUDA)."""
    if not torch.cuda.is_available():
        return 0
    return min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))


def local_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
