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

The executor is made of parts with one job each, each given what it needs when it is made: a RaySession
(aitune_ray.cluster.session: Ray, the pool, the schedule), a DriverGpu (aitune_ray.cluster.driver_gpu: the
device to tune for and whether the driver times on its own GPU), Boxes (aitune_ray.cluster.boxes: the modules'
refs in the object store), Restores (aitune_ray.cluster.restores: backends restored on the driver) and
TimingCalls (aitune_ray.cluster.timing_calls: the baseline and confirm sessions in the schedule).
RayExecutor holds them and delegates.
"""

from __future__ import annotations

import logging
import platform
import time
import weakref
from typing import Callable

import ray
import torch

import aitune_ray.records.artifacts as artifacts
from aitune_ray.backend.backend import Backend
from aitune_ray.cluster.boxes import Boxes, intent as device_kind
from aitune_ray.cluster.driver_gpu import DriverGpu
from aitune_ray.cluster.handle import RayRunHandle
from aitune_ray.cluster.pool import ActorPool
from aitune_ray.cluster.restores import Restores
from aitune_ray.cluster.session import RaySession, SessionOptions, check_reachable
from aitune_ray.cluster.tasks import Task
from aitune_ray.cluster.timing_calls import TimingCalls
from aitune_ray.decision.session import CONFIRM_ROUNDS, Session
from aitune_ray.errors import ConfigError
from aitune_ray.measure.timing import Timing
from aitune_ray.records.results import CRASHED, OOM, TIMED_OUT, BuildResult, CandidateJob
from aitune_ray.runtime.warm_up import WARM_UP_MODES
from aitune_ray.worker.seam import Executor, RunHandle, TuneContext

__all__ = ["RayExecutor", "check_reachable"]

logger = logging.getLogger(__name__)


def _of(part: str, name: str, doc: str) -> property:
    """A read-only attribute of the executor that one of its parts holds."""
    return property(lambda self: getattr(getattr(self, part), name), doc=doc)


class RayExecutor(Executor):
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
        self.progress = progress
        self.options = SessionOptions(address=address, gpus_per_actor=gpus_per_actor, cpus_per_actor=cpus_per_actor,
                                      max_actors=max_actors, max_actor_restarts=max_actor_restarts,
                                      artifact_dir=artifact_dir, inline_artifact_limit_mb=inline_artifact_limit_mb,
                                      log_dir=log_dir, warm_up=warm_up, gpu_kind=gpu_kind or None)
        self.session = RaySession(self.options)
        self.driver_gpu = DriverGpu(self.session)
        self.boxes = Boxes(self.session.wait_started)
        self.restores = Restores()
        self.timing = TimingCalls(self.session, self.driver_gpu, self.boxes, self.restores, self.emit,
                                  task_timeout_s=task_timeout_s, remeasure_rounds=remeasure_rounds)
        self._handles: weakref.WeakSet = weakref.WeakSet()   # the run handles of this job (stop_all stops them)

    # ----- the options, and what the parts hold ---------------------------------------------------
    address = _of("options", "address", "The Ray cluster given (None: RAY_ADDRESS, a running Ray or a new one).")
    cpus_per_actor = _of("options", "cpus_per_actor", "The CPUs Ray reserves for each actor.")
    max_actors = _of("options", "max_actors", "The most actors the pool has (None: one per GPU share).")
    max_actor_restarts = _of("options", "max_actor_restarts", "Replacements after failures, per actor slot.")
    artifact_dir = _of("options", "artifact_dir", "Where large artifacts travel through (None: the object store).")
    inline_artifact_limit_mb = _of("options", "inline_artifact_limit_mb", "Artifacts up to this travel inline.")
    log_dir = _of("options", "log_dir", "The actors' log folder given (None: a temporary one).")
    warm_up = _of("options", "warm_up", "What each GPU actor does as it starts.")
    gpu_kind = _of("options", "gpu_kind", "The GPU kind to tune for (None: any node).")
    task_timeout_s = _of("timing", "task_timeout_s", "A task running longer is timed out and its actor replaced.")
    remeasure_rounds = _of("timing", "remeasure_rounds", "Paired rounds per batch size of the confirm session.")
    gpus_per_actor = _of("session", "gpus_per_actor", "The GPUs of each actor in use (the layout's, once chosen).")
    layout = _of("session", "layout", "The executor's own choice of actors per GPU (gpus_per_actor=None), once made.")
    schedule = _of("session", "schedule", "The job's one schedule over the actor pool (opens the executor).")
    open_s = _of("session", "open_s", "Seconds open() took to start or join Ray and create the actors.")
    started_lean = _of("session", "started_lean", "A Ray started here: without its API server (lean_start).")
    shutdown_s = _of("session", "shutdown_s", "Seconds the last close() spent in ray.shutdown().")
    puts = _of("boxes", "puts", "ray.put calls made for modules and samples.")
    put_s = _of("boxes", "put_s", "Seconds those ray.put calls took.")

    @property
    def pool(self) -> ActorPool | None:
        """The actor pool, once open() made it (waiting for a start still under way)."""
        return self.session.pool

    @pool.setter
    def pool(self, value) -> None:
        self.session.pool = value

    # ----- lifecycle ----------------------------------------------------------------------------
    def open(self) -> None:
        """Connect to Ray, or start it on this machine (on a thread of its own), and create the tuner actors
        (RaySession.open)."""
        self.session.open()

    def close(self) -> None:
        self.boxes.clear()
        self.timing.clear()
        self.session.close()

    def resolve_device(self, device) -> torch.device:
        """cpu or cuda, judged by the cluster's GPUs rather than this machine's (DriverGpu.resolve_device)."""
        return self.driver_gpu.resolve_device(device)

    def actors_share_gpus(self) -> bool:
        """Whether the actors share their GPUs, with each other or with this driver (RaySession.actors_share_gpus)."""
        return self.session.actors_share_gpus()

    # ----- helpers ------------------------------------------------------------------------------
    @staticmethod
    def intent(context: TuneContext) -> str:
        """The device kind the actors use for context: cuda or cpu."""
        return device_kind(context)

    def put(self, value):
        """value in Ray's object store (once Ray is up)."""
        return self.boxes.put(value)

    def box(self, context: TuneContext) -> list:
        """[module ref, samples ref]: put once per module; actors cache what they fetched by these refs."""
        return self.boxes.box(context)

    def emit_job(self, context: TuneContext, job: CandidateJob, event: str, status: str = "running",
                 where: dict | None = None, elapsed_s: float = 0.0, task: str = "build", **extra) -> None:
        """A progress event of one candidate job (see Executor.emit)."""
        if event == "done" and status in (CRASHED, OOM, TIMED_OUT):
            self.session.keep_logs()
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
        handle = self._handle(context, jobs)
        if self.session.made:   # else its builds queue when iterated (a local Ray is still starting)
            handle.start()
        return handle

    def submit_early(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        """The builds, queued in the job's schedule behind this module's eager baseline, which takes the first
        idle actor while the others build. On one local GPU the driver times eager itself, with the one actor
        held idle meanwhile, so that nothing else runs on that GPU; while that actor (or Ray) is still
        starting, nothing can, and nothing waits for it."""
        handle = self._handle(context, jobs)
        if self.timing.queue_baseline(context):
            handle.start()
        return handle

    def _handle(self, context: TuneContext, jobs: list[CandidateJob]) -> RayRunHandle:
        """A run handle for the module's batch (the executor opened, and its layout chosen for a first batch)."""
        self.open()
        self.session.choose_layout(context, jobs)
        handle = RayRunHandle(self, context, jobs)
        self._handles.add(handle)
        return handle

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        """Eager timed on one actor, or on the driver (TimingCalls.baseline)."""
        return self.timing.baseline(context)

    def confirm(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session of the finalists (TimingCalls.confirm)."""
        return self.timing.confirm(context, results)

    def release(self, context: TuneContext, result: BuildResult) -> None:
        """Tell the actor that built result to drop it (queued behind whatever that actor runs now; the run
        handle hands each result on before that actor's next build is dispatched)."""
        if self.pool is None:
            return
        for slot in self.pool.alive():
            info = slot.identity()
            if (info.get("node"), info.get("gpu")) == (result.node, result.gpu):
                slot.actor.release.remote(context.name, result.key)

    def materialize(self, context: TuneContext, result: BuildResult) -> Backend:
        """The backend the confirm session timed on this driver, where it ran here; else restored now."""
        return self.restores.materialize(context, result)

    def stop_all(self, reason: str) -> None:
        for handle in list(self._handles):
            handle.stop()
        self.session.cancel_all(reason)

    def discard(self, context: TuneContext) -> None:
        self.boxes.drop(context.name)
        self.restores.drop(context.name)
        if self.pool is not None:
            for slot in self.pool.alive():
                slot.actor.discard.remote(context.name)

    # ----- for tests and tools ------------------------------------------------------------------
    def actor_stats(self) -> list[dict]:
        """Each live actor's counters: module loads, cached modules and built backends."""
        self.open()
        return ray.get([s.actor.stats.remote() for s in self.pool.alive()])
