"""RayExecutor: candidate builds on GPU-pinned Ray actors, on one machine or across a cluster.

One TunerActor per GPU (gpus_per_actor each) does its own build, correctness check and profile, so a GPU
that measures never builds something else at the same time. The module and its samples are put in the
object store once per module; each actor fetches them once and caches them. Results come back in
completion order. A candidate that raises, kills its worker, runs past task_timeout_s or runs out of
memory becomes that candidate's result ("error", "crashed", "timed out", "oom"); its actor is replaced.

Artifacts travel back as bytes inside the result up to inline_artifact_limit_mb, above that through
artifact_dir (a shared path or fsspec URL) when one is set, else as separate object-store objects; the
driver writes them into its workdir as results arrive. materialize() restores the chosen backend on the
driver; when it ran on CUDA and the driver has no CUDA GPU, it returns a DetachedBackend, which a
checkpoint can save but which cannot run inference.

A job whose backend needs a plan before its build (Backend.plan_key: a KernelSelectorBackend without a
finished kernel plan) first gets one from the driver, its tasks on these actors
(aitune_ray.cluster.forge.PlanRun), while the batch's other jobs build; then it builds like the rest.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

import ray
import torch

import aitune_ray.records.artifacts as artifacts
from aitune_ray.backend.backend import Backend
from aitune_ray.cluster.detached import DetachedBackend
from aitune_ray.cluster.driver_gpu import DriverGpu
from aitune_ray.cluster.handle import RayRunHandle
from aitune_ray.cluster.layout import Layout
from aitune_ray.cluster.pool import ActorPool
from aitune_ray.cluster.schedule import Request, Schedule
from aitune_ray.cluster.session import RaySession, check_reachable, cpu_module, tensors_of_sample
from aitune_ray.decision.session import CONFIRM_ROUNDS
from aitune_ray.cluster.starting import Background
from aitune_ray.cluster.tasks import Task
from aitune_ray.cluster.timing_calls import TimingCalls
from aitune_ray.errors import ConfigError
from aitune_ray.worker.seam import Executor, RunHandle, TuneContext
from aitune_ray.records.results import CRASHED, OOM, TIMED_OUT, BuildResult, CandidateJob
from aitune_ray.runtime.warm_up import WARM_UP_MODES

__all__ = ["RayExecutor", "check_reachable"]

logger = logging.getLogger(__name__)


class RayExecutor(RaySession, DriverGpu, TimingCalls, Executor):
    """Runs candidate jobs on a pool of Ray actors, one per GPU, through one schedule for every module of
    the job (aitune_ray.cluster.schedule): modules are tuned at once.

    address: a Ray cluster to connect to (else RAY_ADDRESS, else an already initialized Ray, else Ray is
        started on this machine; close() shuts down only a Ray this executor started or connected).
    gpus_per_actor: the GPUs of each actor; the pool has one actor per gpus_per_actor GPUs of the cluster, at
        most max_actors. Below 1, several actors share each GPU (0.5: two): they build side by side and
        take turns at it for every timing (aitune_ray.measure.turns), and each holds its own copy of the
        model. None (the default): 1, except on a Ray this executor starts on a machine of two GPUs or
        more, where two actors share each GPU when the first batch has more builds than GPUs, the node has
        the CPUs for their compiles, and two actors' copies of the model fit in a GPU's memory beside the
        driver's (aitune_ray.cluster.layout). A cluster without GPUs gets max_actors (or 1) CPU actors.
    cpus_per_actor: the CPUs Ray reserves for each actor (its compile workers use its share of the node's).
    task_timeout_s: a candidate running longer is "timed out" and its actor is killed and replaced.
    max_actor_restarts: replacements after failures, per actor slot; a slot past it is retired.
    artifact_dir / inline_artifact_limit_mb: how artifacts return (see aitune_ray.records.artifacts).
    log_dir: each actor's own log file goes here, and its work folder while it lives (default: a new
        temporary directory, removed at close unless a worker crashed, hung or ran out of memory).
    progress: called with a dict per candidate event; the same is logged on "aitune_ray.progress".
    remeasure_rounds: paired shuffled rounds per recorded batch size of the confirm session (aitune_ray.decision).
    gpu_kind: the GPU kind to tune for on a cluster of several (Ray's accelerator type, "H100", or a custom
        resource label its nodes carry; aitune_ray.cluster.kinds): actors go only to nodes of that kind, and
        a cluster without one is refused at open(). None: any node.
    warm_up: what each GPU actor does as it starts, on a thread of its own until its first task stops it
        (aitune_ray.runtime.warm_up): "compile" compiles a small function (Inductor's and Triton's first use is
        paid there), "imports" only starts the compile workers and imports the compiler, "off" nothing.
    """

    concurrent_modules = True

    def __init__(self, address: str | None = None, *, gpus_per_actor: float | None = None, cpus_per_actor: float = 1,
                 max_actors: int | None = None, task_timeout_s: float = 1800.0, max_actor_restarts: int = 3,
                 artifact_dir: str | None = None, inline_artifact_limit_mb: int = 256, log_dir: str | None = None,
                 progress: Callable[[dict], None] | None = None, remeasure_rounds: int = CONFIRM_ROUNDS,
                 warm_up: str = "compile", gpu_kind: str | None = None):
        if (gpus_per_actor is not None and gpus_per_actor < 0) or cpus_per_actor < 0:
            raise ConfigError("gpus_per_actor and cpus_per_actor must not be negative")
        if max_actors is not None and max_actors < 1:
            raise ConfigError(f"max_actors must be at least 1, got {max_actors}")
        if task_timeout_s <= 0 or max_actor_restarts < 0 or inline_artifact_limit_mb < 0 or remeasure_rounds < 1:
            raise ConfigError("task_timeout_s and remeasure_rounds must be positive; max_actor_restarts and "
                              "inline_artifact_limit_mb must not be negative")
        if warm_up not in WARM_UP_MODES:
            raise ConfigError(f"warm_up must be one of {', '.join(WARM_UP_MODES)}, got {warm_up!r}")
        artifacts.check_artifact_dir(artifact_dir)
        self.address = address
        self.gpus_per_actor = 1.0 if gpus_per_actor is None else gpus_per_actor   # the layout in use
        self.cpus_per_actor, self.max_actors = cpus_per_actor, max_actors
        self.layout: Layout | None = None   # the executor's own choice (gpus_per_actor=None), once made
        self._layout_open = gpus_per_actor is None   # the choice may still follow the first batch
        self._layout_lock = threading.Lock()
        self.task_timeout_s, self.max_actor_restarts = task_timeout_s, max_actor_restarts
        self.artifact_dir, self.inline_artifact_limit_mb = artifact_dir, inline_artifact_limit_mb
        self.log_dir, self.progress, self.remeasure_rounds = log_dir, progress, remeasure_rounds
        self._restores: dict[tuple[str, str], Backend] = {}   # finalists restored here by a confirm session
        self.warm_up = warm_up
        self.gpu_kind = gpu_kind or None
        self._pool: ActorPool | None = None
        self._starting: Background | None = None   # a local Ray's start, under way on its own thread
        self._local_gpus = 0                       # the GPUs a local Ray was started with
        self._driver_turns = False                 # this driver uses the pool's one GPU: its actors take turns
        self.open_s: float | None = None       # seconds open() took to start or join Ray and create the actors
        self.started_lean: bool | None = None   # a Ray started here: without its API server (lean_start)
        self.shutdown_s: float | None = None   # seconds the last close() spent in ray.shutdown()
        self.puts = 0                   # ray.put calls made for modules and samples
        self.put_s = 0.0                # seconds those took
        self._own_ray = False
        self._local = False             # this executor started Ray on this machine
        self._boxes: dict[str, tuple] = {}
        self._baselines: dict[str, Request] = {}   # module name -> its eager baseline, queued by submit_early
        self._schedule: Schedule | None = None     # the job's one schedule over the pool
        self._handles: weakref.WeakSet = weakref.WeakSet()   # the run handles of this job (stop_all stops them)
        self._own_log_dir: str | None = None   # the log folder open() made (removed at close when nothing failed)
        self._reaper = None                    # ends the local Ray started here should this process die
        self._failed = False                   # a worker crashed, hung or ran out of memory: logs are kept

    # ----- lifecycle ----------------------------------------------------------------------------















    # ----- helpers ------------------------------------------------------------------------------
    @staticmethod
    def intent(context: TuneContext) -> str:
        """The device kind the actors use for context: cuda or cpu."""
        return "cuda" if torch.device(context.device).type == "cuda" else "cpu"

    def put(self, value):
        """value in Ray's object store (once Ray is up)."""
        self._wait_started()   # ray.put before a local Ray is up would start a second one
        self.puts += 1
        started = time.perf_counter()
        try:
            return ray.put(value)
        finally:
            self.put_s += time.perf_counter() - started

    def box(self, context: TuneContext) -> list:
        """[module ref, samples ref]: put once per module; actors cache what they fetched by these refs."""
        entry = self._boxes.get(context.name)
        if entry is not None and entry[0] is context.module and entry[1] is context.samples:
            return entry[2]
        samples = context.samples
        if any(t.device.type != "cpu" for s in samples for t in tensors_of_sample(s)):
            samples = samples.to("cpu")
        box = [self.put(cpu_module(context.module)), self.put(samples)]
        self._boxes[context.name] = (context.module, context.samples, box)
        return box


    def emit_job(self, context: TuneContext, job: CandidateJob, event: str, status: str = "running",
                 where: dict | None = None, elapsed_s: float = 0.0, task: str = "build", **extra) -> None:
        """A progress event of one candidate job (see Executor.emit)."""
        self._failed = self._failed or (event == "done" and status in (CRASHED, OOM, TIMED_OUT))
        self.emit(context, event, task=task, job=job, status=status, where=where or {}, elapsed_s=elapsed_s, **extra)

    @staticmethod
    def driver() -> dict:
        """Where the driver's own work (profiling for a kernel plan) runs, for progress events."""
        return {"node": platform.node(), "gpu": "driver"}

    def task_done(self, context: TuneContext, task: Task, result: BuildResult) -> None:
        """The "done" event of a build task."""
        where = {"node": result.node, "gpu": result.gpu} if result.node else task.where
        out = task.out if isinstance(task.out, dict) else {}
        # The call's wall-clock start and end on the actor: its own time there and, against the driver's
        # clock on the same node, the time in Ray's queue before the call and in the transfer after it.
        timing = {k: round(out[k], 3) for k in ("began_at", "ended_at") if out.get(k) is not None}
        self.emit_job(context, task.payload.payload, "done", result.status, where, time.monotonic() - task.dispatched,
                      **timing)

    # ----- Executor -----------------------------------------------------------------------------







    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        self.open()
        self._choose_layout(context, jobs)
        handle = RayRunHandle(self, context, jobs)
        self._handles.add(handle)
        if self._pool is not None:   # else its builds queue when iterated (a local Ray is still starting)
            handle.start()
        return handle

    def submit_early(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        """The builds, queued in the job's schedule behind this module's eager baseline, which takes the first
        idle actor while the others build. On one local GPU the driver times eager itself, with the one actor
        held idle meanwhile, so that nothing else runs on that GPU; while that actor (or Ray) is still
        starting, nothing can, and nothing waits for it."""
        self.open()
        self._choose_layout(context, jobs)
        handle = RayRunHandle(self, context, jobs)
        self._handles.add(handle)
        on_driver = self._driver_times(context)
        if self._pool is None and on_driver:   # Ray is still starting: eager is timed now, the builds follow
            placeholder = Request("baseline", (), context.name, 0.0, on_driver=True, timing=True, state="placeholder")
            placeholder.started.set()
            self._baselines[context.name] = placeholder
            return handle
        request = self._baseline_request(context, on_driver)
        self._baselines[context.name] = request
        self.schedule.submit(request)
        handle.start()
        return handle


    def _restored(self, context: TuneContext, result: BuildResult) -> Backend:
        """result's backend restored on this driver (once per module; materialize() hands out the same one)."""
        key = (context.name, result.key)
        if key not in self._restores:
            self._restores[key] = self._restore(context, result)
        backend = self._restores[key]
        backend.activate()
        return backend

    def release(self, context: TuneContext, result: BuildResult) -> None:
        """Tell the actor that built result to drop it (queued behind whatever that actor runs now; the run
        handle hands each result on before that actor's next build is dispatched)."""
        if self.pool is None:
            return
        for slot in self.pool.alive():
            info = slot.identity()
            if (info.get("node"), info.get("gpu")) == (result.node, result.gpu):
                slot.actor.release.remote(context.name, result.key)

    def _outbound(self, context: TuneContext, result: BuildResult) -> dict:
        """A result's artifacts as a worker can read them: files this driver wrote travel as bytes."""
        workdir = Path(context.workdir).resolve()
        sent = {}
        for name, value in result.artifacts.items():
            if isinstance(value, str) and not artifacts.is_url(value) and workdir in Path(value).resolve().parents:
                sent[name] = Path(value).read_bytes()
            else:
                sent[name] = value
        return sent

    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        """The backend the confirm session timed on this driver, where it ran here; else restored now."""
        held = self._restores.pop((context.name, result.key), None)
        if held is not None:
            held.activate()
            return held
        return self._restore(context, result)

    def _restore(self, context: TuneContext, result: BuildResult) -> Backend:
        where = Path(context.workdir) / "materialized" / result.key
        files = artifacts.fetch(result.artifacts, where / "artifacts")
        if result.device.startswith("cuda") and not torch.cuda.is_available():
            logger.warning("[%s] %s ran on %s, and this driver has no CUDA GPU: it can be saved to a checkpoint "
                           "but not called here", context.name, result.backend, result.gpu)
            return DetachedBackend(result, files)
        device = torch.device("cpu")
        if result.device.startswith("cuda"):
            device = context.device if torch.device(context.device).type == "cuda" else torch.device("cuda")
        backend = Backend.from_spec(result.spec)
        backend.restore(context.module, result.state, files, device, where)
        backend.activate()
        return backend

    def stop_all(self, reason: str) -> None:
        for handle in list(self._handles):
            handle.stop()
        if self._schedule is not None:
            self._schedule.cancel_all(reason)

    def discard(self, context: TuneContext) -> None:
        self._boxes.pop(context.name, None)
        for key in [k for k in self._restores if k[0] == context.name]:
            self._restores.pop(key).deactivate()
        if self.pool is not None:
            for slot in self.pool.alive():
                slot.actor.discard.remote(context.name)

    # ----- for tests and tools ------------------------------------------------------------------
    def actor_stats(self) -> list[dict]:
        """Each live actor's counters: module loads, cached modules and built backends."""
        self.open()
        return ray.get([s.actor.stats.remote() for s in self.pool.alive()])


