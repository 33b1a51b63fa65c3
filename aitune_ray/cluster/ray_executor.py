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

import collections
import contextlib
import copy
import logging
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import ray
import torch

from aitune_ray.backend.backend import Backend
import aitune_ray.artifacts as artifacts
from aitune_ray.bytecode import advice, uncached
from aitune_ray.cluster import layout, lean_start
from aitune_ray.cluster.detached import DetachedBackend
from aitune_ray.cluster.layout import Layout
from aitune_ray.cluster.handle import RayRunHandle
from aitune_ray.decision.session import CONFIRM_ROUNDS, Session
from aitune_ray.executor import Executor, RunHandle, TuneContext
from aitune_ray.cluster.pool import ActorPool, Slot
from aitune_ray.cluster.starting import Background
from aitune_ray.cluster.tasks import Task, TaskRunner
from aitune_ray.device import gpu_identity, parse_device
from aitune_ray.errors import BuildError, ClusterError, ConfigError, DeviceError
from aitune_ray.failures import classify, short
from aitune_ray.measure.timing import Timing, profile_samples
from aitune_ray.measure.turns import shares_gpu, turns_for
from aitune_ray.results import CRASHED, ERROR, OOM, TIMED_OUT, BuildResult, CandidateJob
from aitune_ray.warm_up import WARM_UP_MODES
from aitune_ray.worker import confirm_session, confirmed, finalist

logger = logging.getLogger(__name__)


def _cpu_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module as it travels: on the CPU (CUDA tensors do not unpickle on a worker with other GPUs)."""
    tensors = list(module.parameters()) + list(module.buffers())
    if all(t.device.type == "cpu" for t in tensors):
        return module
    return copy.deepcopy(module).to("cpu")


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Raise ClusterError naming address when nothing listens there (ray.init would retry for minutes)."""
    import socket

    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(f"the Ray cluster at {address} cannot be reached ({exc.strerror or exc}); check the "
                           "address (--address, executor.address or RAY_ADDRESS) and that its head node is up") from exc


def _remove_work_folders(log_dir: str, own: str | None, keep_logs: bool) -> None:
    """Remove the actors' work folders under log_dir, and log_dir itself when this executor made it and no
    worker crashed, hung or ran out of memory (then the logs stay: the report names them)."""
    import shutil

    folder = Path(log_dir)
    for work in folder.glob("work-actor*"):
        shutil.rmtree(work, ignore_errors=True)
    if own and not keep_logs:
        shutil.rmtree(own, ignore_errors=True)
    elif own:
        logger.info("actor logs kept in %s (a worker crashed, hung or ran out of memory)", own)


def _stop_local_monitor() -> bool:
    """Kill the autoscaler monitor of the Ray this process started, before ray.shutdown(). Shutdown sends
    each of Ray's processes SIGTERM and waits up to a second for it; the monitor, which a single-node Ray
    started here has no use for, takes that whole second. Returns whether one was killed."""
    node = getattr(ray._private.worker, "_global_node", None)   # Ray's own handle on the processes it started
    infos = (getattr(node, "all_processes", None) or {}).get("monitor") or []
    killed = False
    for info in infos:
        process = getattr(info, "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            with contextlib.suppress(Exception):
                process.wait(timeout=1)
            killed = True
    return killed


class RayExecutor(Executor):
    """Runs candidate jobs on a pool of Ray actors, one per GPU.

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
    artifact_dir / inline_artifact_limit_mb: how artifacts return (see aitune_ray.artifacts).
    log_dir: each actor's own log file goes here, and its work folder while it lives (default: a new
        temporary directory, removed at close unless a worker crashed, hung or ran out of memory).
    progress: called with a dict per candidate event; the same is logged on "aitune_ray.progress".
    remeasure_rounds: paired shuffled rounds per recorded batch size of the confirm session (aitune_ray.decision).
    warm_up: what each GPU actor does as it starts, on a thread of its own until its first task stops it
        (aitune_ray.warm_up): "compile" compiles a small function (Inductor's and Triton's first use is
        paid there), "imports" only starts the compile workers and imports the compiler, "off" nothing.
    """

    def __init__(self, address: str | None = None, *, gpus_per_actor: float | None = None, cpus_per_actor: float = 1,
                 max_actors: int | None = None, task_timeout_s: float = 1800.0, max_actor_restarts: int = 3,
                 artifact_dir: str | None = None, inline_artifact_limit_mb: int = 256, log_dir: str | None = None,
                 progress: Callable[[dict], None] | None = None, remeasure_rounds: int = CONFIRM_ROUNDS,
                 warm_up: str = "compile"):
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
        self._baseline_slots: dict = {}   # module name -> the Slot submit() kept for its eager baseline
        self._driver_baseline: set[str] = set()   # modules whose eager baseline this driver times
        self._own_log_dir: str | None = None   # the log folder open() made (removed at close when nothing failed)
        self._failed = False                   # a worker crashed, hung or ran out of memory: logs are kept

    # ----- lifecycle ----------------------------------------------------------------------------
    @property
    def pool(self) -> ActorPool | None:
        """The actor pool, once open() made it (waiting for a start still under way)."""
        self._wait_started()
        return self._pool

    def _wait_started(self) -> None:
        """Wait for a local Ray's start under way; raises ClusterError when it failed."""
        if self._starting is not None:
            self._starting.wait()

    @pool.setter
    def pool(self, value) -> None:
        self._pool = value

    def open(self) -> None:
        """Connect to Ray, or start it on this machine, and create the tuner actors. A Ray it starts here
        starts on a thread of its own and open() returns at once: what needs the actors waits for them, while
        the driver records, times eager and profiles (and the CLI builds its model) meanwhile."""
        if self._pool is not None or self._starting is not None:
            return
        missing = uncached()
        if missing:   # the actors on this machine pay it before their first build; doctor checks every node
            logger.warning("tuner actors on this machine will start slowly: %s", advice(missing))
        if ray.is_initialized() or self.address or os.environ.get("RAY_ADDRESS"):
            self._start()
            return
        # The local Ray gets the GPUs this process sees: the pool's size is then known before Ray is up.
        self._local_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self._driver_turns = self._local_gpus == 1 and self.gpus_per_actor > 0   # the one GPU is this driver's
        self._own_ray = self._local = True
        self._starting = Background(self._start, "starting Ray on this machine")

    def _start(self) -> None:
        started = time.perf_counter()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            if address:
                logger.info("connecting to the Ray cluster at %s", address)
                check_reachable(address)
                ray.init(address=address)
            else:
                logger.info("starting Ray on this machine (local single-node mode)")
                # No idle workers prestarted, one per CPU: on a many-core machine their start competes
                # for the CPUs with the driver's recording and the tuner actors' own start. Nor Ray's API
                # server, which this job's own Ray does not serve (lean_start).
                self.started_lean = lean_start.start(lambda: ray.init(
                    include_dashboard=False, log_to_driver=False, num_gpus=self._local_gpus,
                    _system_config={"prestart_worker_first_driver": False, "enable_worker_prestart": False}))
            self._own_ray = True
        resources = ray.cluster_resources()
        self._close_layout("no batch had come when Ray was up")
        size, num_gpus = self._pool_shape(resources.get("GPU", 0.0), resources.get("CPU", 0.0))
        if not self._local:
            self._driver_turns = self._driver_uses_the_gpu(size)
        log_dir = self.log_dir or tempfile.mkdtemp(prefix="aitune-ray-logs-")
        self._own_log_dir = None if self.log_dir else log_dir
        self._pool = ActorPool(size, num_gpus=num_gpus, num_cpus=self.cpus_per_actor,
                               turns=self._driver_turns,
                               max_restarts=self.max_actor_restarts, log_dir=log_dir,
                               limit_bytes=int(self.inline_artifact_limit_mb * 2**20), artifact_dir=self.artifact_dir,
                               warm_up=self.warm_up)
        self.open_s = time.perf_counter() - started
        logger.info("%d tuner actor(s), %g GPU and %g CPU each; logs in %s", size, num_gpus, self.cpus_per_actor,
                    log_dir)

    def _choose_layout(self, context: TuneContext, jobs: list[CandidateJob]) -> None:
        """With gpus_per_actor=None, on a Ray being started here: the actors per GPU for this first batch
        (aitune_ray.cluster.layout), unless the pool was made already."""
        with self._layout_lock:
            if not self._layout_open:
                return
            self._layout_open = False
            if not (self._local and self._local_gpus > 0 and torch.device(context.device).type == "cuda"):
                return
            if self.max_actors is not None and self.max_actors <= self._local_gpus:
                self.layout = Layout(1, f"max_actors={self.max_actors}")
            else:
                tensors = [*context.module.parameters(), *context.module.buffers(),
                           *(t for sample in context.samples for t in _tensors(sample))]
                self.layout = layout.choose(job_bytes=layout.tensor_bytes(tensors), gpu_bytes=layout.local_gpu_bytes(),
                                            gpus=self._local_gpus, cpus=layout.local_cpus(), builds=len(jobs))
            self.gpus_per_actor = self.layout.gpus_per_actor
            logger.info("%d tuner actor(s) per GPU: %s", self.layout.actors_per_gpu, self.layout.reason)

    def _close_layout(self, why: str) -> None:
        """The pool is being made: the layout is what it is now."""
        with self._layout_lock:
            if self._layout_open and self._local and self._local_gpus > 0:
                self.layout = Layout(1, why)
                logger.info("one tuner actor per GPU: %s", why)
            self._layout_open = False

    def _pool_shape(self, gpus: float, cpus: float | None, quiet: bool = False) -> tuple[int, float]:
        """(actors, GPUs per actor) on a cluster of gpus and cpus (None: not known yet, nothing is cut)."""
        if gpus > 0 and self.gpus_per_actor > 0:
            num_gpus, size = self.gpus_per_actor, int(gpus / self.gpus_per_actor + 1e-9)
            size = min(size, self.max_actors or size)
        else:
            num_gpus, size = 0, self.max_actors or 1
            if not quiet:
                logger.info("the Ray cluster has no GPU (or gpus_per_actor=0): %d CPU actor(s)", size)
        if self.cpus_per_actor > 0 and cpus and size * self.cpus_per_actor > cpus:
            fit = max(1, int(cpus / self.cpus_per_actor + 1e-9))
            logger.warning("%d actor(s) of %g CPU do not fit the cluster's %g CPUs: using %d", size,
                           self.cpus_per_actor, cpus, fit)
            size = fit
        if size < 1:
            raise ConfigError(f"no actor fits: the cluster has {gpus:g} GPUs, gpus_per_actor={self.gpus_per_actor}")
        return size, num_gpus

    def _actors(self) -> int:
        """How many actors the pool has, or will have once a local start is done (without waiting for it)."""
        if self._pool is None and self._local and self._starting is not None and not self._starting.done():
            return self._pool_shape(self._local_gpus, None, quiet=True)[0]
        return len(self.pool.slots) if self.pool is not None else 0

    def close(self) -> None:
        starting, self._starting = self._starting, None
        if starting is not None:   # a start still under way is waited for, then undone
            with contextlib.suppress(ClusterError):
                starting.wait()
        try:
            self._stop()
        finally:
            if starting is not None:   # after the shutdown: Ray's processes go with the thread that started them
                starting.release()

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            _remove_work_folders(self._pool.log_dir, self._own_log_dir, keep_logs=self._failed)
            self._pool = None
        self._boxes.clear()
        self._baseline_slots.clear()
        self._driver_baseline.clear()
        if self._own_ray and ray.is_initialized():
            started = time.perf_counter()
            if self._local:
                try:
                    _stop_local_monitor()
                except Exception as exc:  # Ray's internals moved: shutdown then waits its second for it
                    logger.debug("the local Ray's monitor was not stopped first: %s", exc)
            ray.shutdown()
            self.shutdown_s = time.perf_counter() - started
        self._own_ray = self._local = self._driver_turns = False

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

    # ----- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _intent(context: TuneContext) -> str:
        return "cuda" if torch.device(context.device).type == "cuda" else "cpu"

    def _put(self, value):
        self._wait_started()   # ray.put before a local Ray is up would start a second one
        self.puts += 1
        started = time.perf_counter()
        try:
            return ray.put(value)
        finally:
            self.put_s += time.perf_counter() - started

    def _box(self, context: TuneContext) -> list:
        """[module ref, samples ref]: put once per module; actors cache what they fetched by these refs."""
        entry = self._boxes.get(context.name)
        if entry is not None and entry[0] is context.module and entry[1] is context.samples:
            return entry[2]
        samples = context.samples
        if any(t.device.type != "cpu" for s in samples for t in _tensors(s)):
            samples = samples.to("cpu")
        box = [self._put(_cpu_module(context.module)), self._put(samples)]
        self._boxes[context.name] = (context.module, context.samples, box)
        return box

    def _slot(self, prefer: set | None = None, holder: str = "") -> Slot:
        """A live slot: the one whose actor writes the log holder (the actor that built the results at hand,
        which then need no restore), else one on a (node, gpu) in prefer, else an idle one."""
        self.open()
        slots = self.pool.alive()
        slots = [s for s in slots if s.generation == 1 or s.ready()] or slots   # not a replacement still pending
        if not slots:
            raise BuildError("no tuner actor is left (every slot used up its max_actor_restarts)")
        if holder:
            for slot in slots:
                if slot.log_path == holder:
                    return slot
        if prefer:
            for slot in slots:
                info = slot.identity()
                if (info.get("node"), info.get("gpu")) in prefer:
                    return slot
        return next((s for s in slots if not s.busy), slots[0])

    def _call(self, slot: Slot, method: str, args: tuple, what: str):
        """One actor call under task_timeout_s (the task runner's); a dead or stuck actor is replaced and
        this raises BuildError."""
        runner = TaskRunner(self.pool)
        was_busy, generation = slot.busy, slot.generation   # whoever holds the slot keeps it
        try:
            task = runner.call(slot, method, args, self.task_timeout_s, name=f"{method} {args[0]}")
        except KeyboardInterrupt:
            runner.cancel(f"{what} interrupted")
            raise
        finally:
            if slot.generation == generation and slot.alive:
                slot.busy = was_busy
        if task.timed_out:
            raise BuildError(f"{what} ran past task_timeout_s={self.task_timeout_s:g}s on {task.log_path}")
        if task.failure is not None and task.failure.worker_lost:
            raise BuildError(f"the worker died during {what} ({short(task.failure.cause)}); log: {task.log_path}") \
                from task.failure.cause
        if task.failure is not None:
            raise BuildError(f"{what} failed: {task.failure.error}") from task.failure.cause
        return task.out

    def _emit(self, context: TuneContext, job: CandidateJob, event: str, status: str, where: dict,
              elapsed_s: float, task: str = "build", **extra) -> None:
        self._failed = self._failed or (event == "done" and status in (CRASHED, OOM, TIMED_OUT))
        self.emit(context, event, task=task, job=job, status=status, where=where, elapsed_s=elapsed_s, **extra)

    @staticmethod
    def driver() -> dict:
        """Where the driver's own work (profiling for a kernel plan) runs, for progress events."""
        return {"node": platform.node(), "gpu": "driver"}

    def _done(self, context: TuneContext, task: Task, result: BuildResult) -> None:
        where = {"node": result.node, "gpu": result.gpu} if result.node else task.where
        out = task.out if isinstance(task.out, dict) else {}
        # The call's wall-clock start and end on the actor: its own time there and, against the driver's
        # clock on the same node, the time in Ray's queue before the call and in the transfer after it.
        timing = {k: round(out[k], 3) for k in ("began_at", "ended_at") if out.get(k) is not None}
        self._emit(context, task.payload, "done", result.status, where, time.monotonic() - task.dispatched, **timing)

    # ----- Executor -----------------------------------------------------------------------------
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
                   *(t for sample in context.samples for t in _tensors(sample))]
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

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        """Eager timed on one actor: the one submit_early() kept for it (the others build meanwhile), else
        any; or on the driver (see submit_early)."""
        kept = self._baseline_slots.pop(context.name, None)
        on_driver = context.name in self._driver_baseline
        self._driver_baseline.discard(context.name)
        slot = None if on_driver else kept if kept is not None and kept.alive else self._slot()
        where = {"node": platform.node(), "gpu": f"driver ({gpu_identity(context.device)})"} if on_driver \
            else slot.identity()
        started, status = time.monotonic(), ERROR
        self.emit(context, "measuring", task="baseline", where=where, samples=len(context.samples),
                  batch_sizes=context.samples.batch_sizes())
        try:
            if on_driver:
                logger.info("[%s] timing eager on the driver's GPU while the tuner actor starts", context.name)
                with turns_for(context.device, self.actors_share_gpus()).timing():
                    timed = profile_samples(context.module, context.samples, context.device, context.measure)
                data = {bs: t.to_dict() for bs, t in timed.items()}
            else:
                data = self._call(slot, "baseline", (context.name, self._box(context), self._intent(context),
                                                     context.measure.to_dict()), f"eager baseline of {context.name}")
            status = "ok"
        finally:
            if kept is not None:
                kept.busy = False
            self.emit(context, "done", task="baseline", status=status, where=where if on_driver else slot.identity(),
                      elapsed_s=time.monotonic() - started)
        return {int(bs): Timing.from_dict(t) for bs, t in data.items()}

    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        self.open()
        self._choose_layout(context, jobs)
        return RayRunHandle(self, context, jobs)

    def submit_early(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        """Builds that may start while eager is timed. On one local GPU the driver times eager itself, with
        the one actor kept idle meanwhile, so that nothing else runs on that GPU; while that actor (or Ray)
        is still starting, nothing can, and nothing waits for it."""
        handle = self.submit(context, jobs)
        if not self._driver_times(context):
            handle.start()
        elif self._pool is None or handle.start():
            self._driver_baseline.add(context.name)
        return handle

    def confirm(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session: on this driver when it holds the target GPU (where it times eager itself, see
        _driver_times), with each finalist restored here as materialize() then deploys it (the very objects);
        else on one actor, the one on the GPU that built most finalists (which restores fewest). A session
        that fails (a finalist's restore aside) keeps eager: it is not run again elsewhere."""
        if not results:
            return Session.failure("no finalists")
        if self._driver_times(context):
            return self._confirm_here(context, results)
        identities = collections.Counter((r.node, r.gpu) for r in results)
        payload = [{**finalist(r), "artifacts": self._outbound(context, r)} for r in results]
        best = identities.most_common(1)[0][0]
        prefer = {best}
        holders = collections.Counter(r.log_path for r in results if r.log_path and (r.node, r.gpu) == best)
        holder = holders.most_common(1)[0][0] if holders else ""
        for attempt in (1, 2):   # an actor that died in the session was replaced: a whole new session, elsewhere
            slot = self._slot(prefer=prefer, holder=holder if attempt == 1 else "")
            started = time.monotonic()
            self.emit(context, "remeasuring", task="remeasure", where=slot.identity(),
                      finalists=[r.key for r in results])
            try:
                out = self._call(slot, "confirm", (context.name, self._box(context), self._intent(context), payload,
                                                   self.remeasure_rounds, context.measure.to_dict()),
                                 f"confirm session of {context.name}")
                break
            except BuildError as exc:
                self.emit(context, "done", task="remeasure", status=ERROR, where=slot.identity(),
                          elapsed_s=time.monotonic() - started)
                lost = exc.__cause__ is not None and classify(exc.__cause__).worker_lost
                if attempt == 2 or not lost or not self.pool.alive():
                    return Session.failure(str(exc), " ".join(str(v) for v in slot.identity().values() if v))
                logger.warning("[%s] the confirm session's actor was lost; a new session on another: %s",
                               context.name, str(exc))
                prefer = None
        self.emit(context, "done", task="remeasure", status="error" if out.get("failed") else "ok",
                  where=slot.identity(), elapsed_s=time.monotonic() - started)
        logger.info("[%s] confirm session of %d finalists from %d GPUs on %s %s", context.name, len(results),
                    len(identities), out.get("node"), out.get("gpu"))
        return confirmed(results, out)

    def _confirm_here(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session on this driver, on finalists restored here and kept for materialize()."""
        where = {"node": platform.node(), "gpu": f"driver ({gpu_identity(context.device)})"}
        started = time.monotonic()
        self.emit(context, "remeasuring", task="remeasure", where=where, finalists=[r.key for r in results])
        backends, errors = {}, {}
        for r in results:
            try:
                backends[r.key] = self._restored(context, r)
            except Exception as exc:  # noqa: BLE001 - that finalist is left out, the others stand
                logger.exception("[%s] cannot restore %s for the confirm session", context.name, r.key)
                errors[r.key] = f"{type(exc).__name__}: {exc}"
        try:
            with turns_for(context.device, self.actors_share_gpus()).timing():
                out = confirm_session(context.module, context.samples, context.device, backends, self.remeasure_rounds,
                                      context.measure, Path(context.workdir) / "control")
        finally:
            for backend in backends.values():
                backend.deactivate()
        out.update(errors=errors, node=where["node"], gpu=where["gpu"])
        self.emit(context, "done", task="remeasure", status="error" if out.get("failed") else "ok", where=where,
                  elapsed_s=time.monotonic() - started)
        return confirmed(results, out)

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


def _tensors(sample) -> list[torch.Tensor]:
    from aitune_ray.samples import tensors_of

    return tensors_of((sample.args, sample.kwargs, sample.outputs))
