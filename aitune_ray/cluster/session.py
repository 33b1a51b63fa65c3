"""RaySession: the Ray side of a RayExecutor's life: connect to a cluster or start Ray here (on a thread of its
own), choose how many actors share each GPU, size and make the actor pool and the job's schedule, shut them
down; and the helpers that go with it.

A part of RayExecutor (aitune_ray.cluster.ray_executor), made from a SessionOptions: it reads nothing else of
the executor.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import threading
import time
from pathlib import Path

import ray
import torch

from aitune_ray.runtime import tempdirs
from aitune_ray.runtime.bytecode import advice, uncached
from aitune_ray.cluster import kinds, layout, lean_start
from aitune_ray.cluster.layout import Layout
from aitune_ray.cluster.pool import ActorPool
from aitune_ray.cluster.schedule import Schedule
from aitune_ray.cluster.starting import Background
from aitune_ray.errors import ClusterError, ConfigError
from aitune_ray.measure.turns import shares_gpu
from aitune_ray.worker.seam import TuneContext
from aitune_ray.records.results import CandidateJob

logger = logging.getLogger(__name__)


def cpu_module(module: torch.nn.Module) -> torch.nn.Module:
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


def remove_work_folders(log_dir: str, own: str | None, keep_logs: bool) -> None:
    """Remove the actors' work folders under log_dir, and log_dir itself when this executor made it and no
    worker crashed, hung or ran out of memory (then the logs stay: the report names them)."""
    import shutil

    folder = Path(log_dir)
    for work in folder.glob("work-actor*"):
        shutil.rmtree(work, ignore_errors=True)
    if own and not keep_logs:
        shutil.rmtree(own, ignore_errors=True)
    elif own:
        tempdirs.keep(own)
        logger.info("actor logs kept in %s (a worker crashed, hung or ran out of memory)", own)


def token_auth_said() -> None:
    """Ray turns token authentication on for a Ray that ray.init() starts here, and warns that it did, unless
    RAY_AUTH_MODE says so explicitly. Token it is, said explicitly (RAY_AUTH_MODE=token, as Ray itself sets
    it): the same protection, without a warning the user of this job can do nothing about. An explicit
    RAY_AUTH_MODE is left as it is."""
    if os.environ.get("RAY_AUTH_MODE") is not None:
        return
    try:   # Ray's own step (ray 2.60): the variable, and Ray's cached config read again
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:
        return   # another Ray: it decides, and says so, itself
    _enable_token_auth()


#: The address a Ray started here takes: its GCS, raylet, agents and workers then listen on loopback only.
LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def loopback_only():
    """Within: a ray.init() that starts a Ray here keeps LOOPBACK as its node's address. ray.init() turns a
    loopback _node_ip_address into the machine's address for other nodes to reach, unless Ray clusters are
    off (ray_constants.ENABLE_RAY_CLUSTER, ray 2.60, as on macOS): off, then, for the start only. A Ray
    whose node address is 127.0.0.1 binds every server to it."""
    try:
        from ray._private import ray_constants
    except ImportError:
        yield
        return
    real = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = real


def private_token() -> None:
    """Under token authentication, Ray's token file (RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token) readable by
    its owner only: one that is missing is made here, mode 0600 (Ray makes it with the umask's mode, mostly
    readable by all), and one of this user's that others may read gets mode 0600. A token given in
    RAY_AUTH_TOKEN needs no file."""
    import secrets
    import stat

    if (os.environ.get("RAY_AUTH_MODE") or "").lower() != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        if not os.environ.get("RAY_AUTH_TOKEN_PATH"):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
                os.chmod(path, 0o600)
                logger.warning("Ray's token file %s was readable by others: now by its owner only (mode 0600)", path)
            return
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))   # as Ray makes one: 256 random bits in hex
    except OSError as exc:
        logger.warning("Ray's token file %s could not be made private: %s", path, exc.strerror or exc)


def watch_session():
    """A SessionReaper for the Ray just started here, watching the processes Ray started for it (None when
    they are not known)."""
    from aitune_ray.cluster.session_reaper import SessionReaper

    try:   # Ray's handle on the processes it started (ray 2.60): type -> [ProcessInfo]
        infos = ray._private.worker._global_node.all_processes
        pids = [info.process.pid for kind in infos.values() for info in kind if info.process is not None]
    except Exception as exc:  # noqa: BLE001 - Ray's internals moved: the session ends as Ray ends it
        logger.debug("the local Ray's processes are not known (%s): no watcher for them", exc)
        return None
    return SessionReaper(pids)


def stop_local_monitor() -> bool:
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


def tensors_of_sample(sample) -> list[torch.Tensor]:
    from aitune_ray.model.samples import tensors_of

    return tensors_of((sample.args, sample.kwargs, sample.outputs))


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """What a RaySession is made from (RayExecutor's arguments of the same names, checked there)."""

    address: str | None = None
    gpus_per_actor: float | None = None   # None: the session chooses (aitune_ray.cluster.layout)
    cpus_per_actor: float = 1
    max_actors: int | None = None
    max_actor_restarts: int = 3
    artifact_dir: str | None = None
    inline_artifact_limit_mb: int = 256
    log_dir: str | None = None
    warm_up: str = "compile"
    gpu_kind: str | None = None


class RaySession:
    """Ray for one executor: the Ray it joined or started, the actor pool and the job's one schedule over it."""

    def __init__(self, options: SessionOptions):
        self.options = options
        self.gpus_per_actor = 1.0 if options.gpus_per_actor is None else options.gpus_per_actor   # the layout in use
        self.layout: Layout | None = None   # the session's own choice (gpus_per_actor=None), once made
        self._layout_open = options.gpus_per_actor is None   # the choice may still follow the first batch
        self._layout_lock = threading.Lock()
        self._pool: ActorPool | None = None
        self._schedule: Schedule | None = None   # the job's one schedule over the pool
        self.starting: Background | None = None   # a local Ray's start, under way on its own thread
        self.local_gpus = 0              # the GPUs a local Ray was started with
        self.driver_turns = False        # this driver uses the pool's one GPU: its actors take turns
        self.local = False               # this session started Ray on this machine
        self._own_ray = False
        self.open_s: float | None = None        # seconds open() took to start or join Ray and create the actors
        self.started_lean: bool | None = None   # a Ray started here: without its API server (lean_start)
        self.shutdown_s: float | None = None    # seconds the last close() spent in ray.shutdown()
        self._own_log_dir: str | None = None    # the log folder open() made (removed at close unless logs are kept)
        self._reaper = None                     # ends the local Ray started here should this process die
        self._keep_logs = False                 # a worker crashed, hung or ran out of memory: logs are kept

    @property
    def schedule(self) -> Schedule:
        """The job's one schedule over the actor pool (made with the pool, waiting for a start under way)."""
        self.open()
        self.wait_started()
        if self._schedule is None:
            raise ClusterError("the executor is closed")
        return self._schedule

    @property
    def pool(self) -> ActorPool | None:
        """The actor pool, once open() made it (waiting for a start still under way)."""
        self.wait_started()
        return self._pool

    @pool.setter
    def pool(self, value) -> None:
        self._pool = value

    @property
    def made(self) -> bool:
        """Whether the pool is made (without waiting for a start under way)."""
        return self._pool is not None

    def wait_started(self) -> None:
        """Wait for a local Ray's start under way; raises ClusterError when it failed."""
        if self.starting is not None:
            self.starting.wait()

    def cancel_all(self, reason: str) -> None:
        """Cancel everything the job's schedule holds (nothing when there is none)."""
        if self._schedule is not None:
            self._schedule.cancel_all(reason)

    def keep_logs(self) -> None:
        """A worker crashed, hung or ran out of memory: close() keeps the actors' logs."""
        self._keep_logs = True

    def open(self) -> None:
        """Connect to Ray, or start it on this machine, and create the tuner actors. A Ray it starts here
        starts on a thread of its own and open() returns at once: what needs the actors waits for them, while
        the driver records, times eager and profiles (and the CLI builds its model) meanwhile."""
        if self._pool is not None or self.starting is not None:
            return
        missing = uncached()
        if missing:   # the actors on this machine pay it before their first build; doctor checks every node
            logger.warning("tuner actors on this machine will start slowly: %s", advice(missing))
        if ray.is_initialized() or self.options.address or os.environ.get("RAY_ADDRESS"):
            self._start()
            return
        # The local Ray gets the GPUs this process sees: the pool's size is then known before Ray is up.
        self.local_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self.driver_turns = self.local_gpus == 1 and self.gpus_per_actor > 0   # the one GPU is this driver's
        self._own_ray = self.local = True
        self.starting = Background(self._start, "starting Ray on this machine")

    def _start(self) -> None:
        started = time.perf_counter()
        options = self.options
        if not ray.is_initialized():
            address = options.address or os.environ.get("RAY_ADDRESS")
            if address:
                logger.info("connecting to the Ray cluster at %s", address)
                check_reachable(address)
                ray.init(address=address)
            else:
                logger.info("starting Ray on this machine (local single-node mode)")
                token_auth_said()
                private_token()
                # No idle workers prestarted, one per CPU: on a many-core machine their start competes
                # for the CPUs with the driver's recording and the tuner actors' own start. Nor Ray's API
                # server, which this job's own Ray does not serve (lean_start). address="local": a Ray of this
                # job's own, never another one found running on this machine (which refuses num_gpus). It
                # listens on loopback only: no other machine reaches it, whatever RAY_AUTH_MODE says.
                with loopback_only():
                    self.started_lean = lean_start.start(lambda: ray.init(
                        address="local", include_dashboard=False, log_to_driver=False, num_gpus=self.local_gpus,
                        _node_ip_address=LOOPBACK, dashboard_host=LOOPBACK,
                        _system_config={"prestart_worker_first_driver": False, "enable_worker_prestart": False}))
                self._reaper = watch_session()
            self._own_ray = True
        resource, gpus, cpus = kinds.capacity(options.gpu_kind, ray.nodes())
        self.close_layout("no batch had come when Ray was up")
        size, num_gpus = self.pool_shape(gpus, cpus)
        if not self.local:
            self.driver_turns = self.driver_uses_the_gpu(size)
        log_dir = options.log_dir or str(tempdirs.make("logs"))
        self._own_log_dir = None if options.log_dir else log_dir
        self._pool = ActorPool(size, num_gpus=num_gpus, num_cpus=options.cpus_per_actor,
                               turns=self.driver_turns,
                               max_restarts=options.max_actor_restarts, log_dir=log_dir,
                               limit_bytes=int(options.inline_artifact_limit_mb * 2**20),
                               artifact_dir=options.artifact_dir, warm_up=options.warm_up,
                               resources={resource: kinds.SLIVER} if resource else None)
        if not self.local:   # a cluster's nodes may join while the job runs: the pool grows onto them
            self._pool.sizer = self.room
        self._schedule = Schedule(self._pool)
        self.open_s = time.perf_counter() - started
        logger.info("%d tuner actor(s), %g GPU and %g CPU each; logs in %s", size, num_gpus, options.cpus_per_actor,
                    log_dir)

    def choose_layout(self, context: TuneContext, jobs: list[CandidateJob]) -> None:
        """With gpus_per_actor=None, on a Ray being started here: the actors per GPU for this first batch
        (aitune_ray.cluster.layout), unless the pool was made already."""
        with self._layout_lock:
            if not self._layout_open:
                return
            self._layout_open = False
            if not (self.local and self.local_gpus > 0 and torch.device(context.device).type == "cuda"):
                return
            max_actors = self.options.max_actors
            if max_actors is not None and max_actors <= self.local_gpus:
                self.layout = Layout(1, f"max_actors={max_actors}")
            else:
                tensors = [*context.module.parameters(), *context.module.buffers(),
                           *(t for sample in context.samples for t in tensors_of_sample(sample))]
                self.layout = layout.choose(job_bytes=layout.tensor_bytes(tensors), gpu_bytes=layout.local_gpu_bytes(),
                                            gpus=self.local_gpus, cpus=layout.local_cpus(), builds=len(jobs))
            self.gpus_per_actor = self.layout.gpus_per_actor
            logger.info("%d tuner actor(s) per GPU: %s", self.layout.actors_per_gpu, self.layout.reason)

    def close_layout(self, why: str) -> None:
        """The pool is being made: the layout is what it is now."""
        with self._layout_lock:
            if self._layout_open and self.local and self.local_gpus > 0:
                self.layout = Layout(1, why)
                logger.info("one tuner actor per GPU: %s", why)
            self._layout_open = False

    def room(self) -> int:
        """How many actors the cluster has room for now (its live nodes of the job's GPU kind)."""
        _, gpus, cpus = kinds.capacity(self.options.gpu_kind, ray.nodes())
        return self.pool_shape(gpus, cpus, quiet=True)[0]

    def pool_shape(self, gpus: float, cpus: float | None, quiet: bool = False) -> tuple[int, float]:
        """(actors, GPUs per actor) on a cluster of gpus and cpus (None: not known yet, nothing is cut)."""
        max_actors, cpus_per_actor = self.options.max_actors, self.options.cpus_per_actor
        if gpus > 0 and self.gpus_per_actor > 0:
            num_gpus, size = self.gpus_per_actor, int(gpus / self.gpus_per_actor + 1e-9)
            size = min(size, max_actors or size)
        else:
            num_gpus, size = 0, max_actors or 1
            if not quiet:
                logger.info("the Ray cluster has no GPU (or gpus_per_actor=0): %d CPU actor(s)", size)
        if cpus_per_actor > 0 and cpus and size * cpus_per_actor > cpus:
            fit = max(1, int(cpus / cpus_per_actor + 1e-9))
            if not quiet:
                logger.warning("%d actor(s) of %g CPU do not fit the cluster's %g CPUs: using %d", size,
                               cpus_per_actor, cpus, fit)
            size = fit
        if size < 1:
            raise ConfigError(f"no actor fits: the cluster has {gpus:g} GPUs, gpus_per_actor={self.gpus_per_actor}")
        return size, num_gpus

    def actors(self) -> int:
        """How many actors the pool has, or will have once a local start is done (without waiting for it)."""
        if self._pool is None and self.local and self.starting is not None and not self.starting.done():
            return self.pool_shape(self.local_gpus, None, quiet=True)[0]
        return len(self.pool.slots) if self.pool is not None else 0

    # ----- the GPUs of the pool and of this driver ------------------------------------------------
    def driver_has_the_gpu(self) -> bool:
        """Whether the cluster's GPUs are this driver's: a Ray started here, or a cluster whose GPUs are all
        on the driver's node (`ray job submit` to a one-GPU machine, where the job's driver runs beside
        the actors)."""
        if self.local:
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

    def on_one_gpu(self, actors: int | None = None) -> bool:
        """Whether every actor of the pool (or of a pool of that many actors) is on one and the same GPU (one
        actor, or several sharing it)."""
        actors = self.actors() if actors is None else actors
        return self.gpus_per_actor > 0 and actors * self.gpus_per_actor <= 1 + 1e-9

    def actors_share_gpus(self) -> bool:
        """Whether the actors share their GPUs, with each other (gpus_per_actor below 1) or with this driver,
        which times eager and profiles on the one GPU of a pool of whole-GPU actors (driver_uses_the_gpu):
        the actors then take turns there, and so do the driver's timings and profiles."""
        return shares_gpu(self.gpus_per_actor) or self.driver_turns

    def driver_uses_the_gpu(self, size: int) -> bool:
        """Whether a pool of size actors, on the cluster this driver joined, is on one GPU that this driver,
        which has CUDA, uses too: a cluster whose one GPU is on the driver's node (`ray job submit` to a
        one-GPU machine). A Ray started here: this machine has one GPU (open())."""
        return torch.cuda.is_available() and self.on_one_gpu(size) and self.driver_has_the_gpu()

    # ----- the end ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the schedule, the pool and a Ray this session started or connected down (a start still under
        way is waited for first)."""
        starting, self.starting = self.starting, None
        if starting is not None:   # a start still under way is waited for, then undone
            with contextlib.suppress(ClusterError):
                starting.wait()
        try:
            self._stop()
        finally:
            if starting is not None:   # after the shutdown: Ray's processes go with the thread that started them
                starting.release()

    def _stop(self) -> None:
        if self._schedule is not None:
            if self._schedule.lost > 0:   # a lost node's logs are kept
                self._keep_logs = True
            self._schedule.close()
            self._schedule = None
        if self._pool is not None:
            self._pool.shutdown()
            remove_work_folders(self._pool.log_dir, self._own_log_dir, keep_logs=self._keep_logs)
            self._pool = None
        if self._own_ray and ray.is_initialized():
            started = time.perf_counter()
            if self.local:
                try:
                    stop_local_monitor()
                except Exception as exc:  # Ray's internals moved: shutdown then waits its second for it
                    logger.debug("the local Ray's monitor was not stopped first: %s", exc)
            ray.shutdown()
            self.shutdown_s = time.perf_counter() - started
        if self._reaper is not None:
            self._reaper.close()
            self._reaper = None
        self._own_ray = self.local = self.driver_turns = False
