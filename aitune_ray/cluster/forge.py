"""RayForgeRunner: the kernel forge's tasks spread over a RayExecutor's GPU actors (injected into a
KernelOptimizer, whose search and choice rule, kernel_forge.selection, are the same as in one process).

The driver profiles once (KernelOptimizer.profile_functions, as inline; a CUDA trace in a child process of
the driver, cluster.profile_process, so that the driver keeps no CUDA profiler attached) and puts each
selected function's recorded samples in the object store once (on the CPU). Then, as actor tasks (TunerActor.forge):

- every generator runs on an actor; its generation_timeout counts from that task's submission, and a
  generator still running at its deadline has its actor killed and replaced; every other result is kept.
  Generators leave at least one actor to the benchmarks when there are two or more;
- every (function, provider) pair is benchmarked on whichever actor is idle (benchmark_provider on that
  actor's GPU, against reference outputs computed there); a generated provider is benchmarked the same way
  as soon as it arrives;
- per function, the original is timed on each GPU that measured a valid candidate, and the choice rule
  (kernel_forge.selection) decides; the confirm session of its finalists runs on one actor.

Every record names the GPU and node its numbers came from, and its confirm session's judgement where there was one
(ProviderBenchmark.remeasured). Only plain data crosses: function names, to_dict() of providers and
generators, CPU FunctionData (once per function), record dicts back. A driver without CUDA tuning for
CUDA actors profiles on its CPU: the time shares then come from CPU kernels.

Plans before builds on Ray (PlanRun): when a RayExecutor batch holds a job whose backend needs a plan
before its build (Backend.plan_key: a KernelSelectorBackend spec without a kernel plan), the driver makes
that plan first with the backend's planner on a RayForgeRunner: it profiles on the thread that consumes
the batch, then searches on a thread of its own; the batch's plain backend builds run on the actors
meanwhile, and the forge's tasks get each idle actor before them. The job's spec then carries the finished
plan (Backend.spec_with_plan) and goes to an actor like any other job, which builds without planning
again. Jobs of one batch with one plan key share one PlanRun, so one profile and one search.

The forge has no scheduler of its own: each task is a Request in the job's one schedule (cluster.schedule),
urgent (after timing calls, before builds), beside every module's builds. A generator's generation_timeout
counts from its dispatch, and a generator still running then has its actor killed and replaced without that
counting as a failure; any other task has the executor's task_timeout_s, and one that runs past it, or whose
worker dies, has its actor replaced like a failed build. Work that prefers a GPU ((node, gpu)) waits for that
actor while it lives. The runner waits on what the schedule tells it (a queue of ended requests), never by
polling.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Iterator

import torch

from aitune_ray.backend.backend import Planner, backend_class_of
from aitune_ray.cluster.pool import Slot
from aitune_ray.cluster.schedule import Request
from aitune_ray.kernel_forge.function_samples import FunctionSample, device_of
from aitune_ray.kernel_forge.kernel_provider.kernel_provider import KernelProvider, kernel_provider_from_dict
from aitune_ray.runtime.device import module_device
from aitune_ray.worker.seam import failed_plan
from aitune_ray.kernel_forge.optimizer import BenchmarkJob, FunctionSearch, KernelOptimizer
from aitune_ray.kernel_forge.profiler import uses_cuda
from aitune_ray.kernel_forge.runner import ForgeRunner
from aitune_ray.cluster.profile_process import ProfileChild, ProfileProcessError, profile_in_child
from aitune_ray.kernel_forge.records import ERROR, OK, GenerationOutcome, ProviderBenchmark
from aitune_ray.measure.turns import turns_for
from aitune_ray.records.failures import outcome
from aitune_ray.records.results import BuildResult, CandidateJob
from aitune_ray.model.samples import move

logger = logging.getLogger(__name__)

class Cancelled(Exception):
    """The plan was no longer wanted (its batch was cancelled, or the executor closed)."""


#: Per forge task: its progress task name and the event that starts it.
EVENTS = {"benchmark": ("forge-benchmark", "benchmarking"), "generate": ("forge-generate", "generating"),
          "original": ("forge-benchmark", "measuring"), "interleaved": ("forge-remeasure", "remeasuring")}


@dataclasses.dataclass(eq=False)
class Work:
    """A forge task's own part (the payload of its schedule Request) and, once it ended, its outcome."""

    task: str                        # benchmark, generate, original, interleaved
    function: str
    label: str                       # what it runs (a provider's or generator's name)
    generator: bool = False
    status: str = ""                 # "" while pending, then OK or why not
    error: str = ""
    out: Any = None
    where: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def what(self) -> str:
        return f"the forge {self.task} of {self.label}"

    def progress_status(self) -> str:
        """A finished task's outcome: the record's own status where the task returned one."""
        if self.status == OK and isinstance(self.out, dict) and isinstance(self.out.get("status"), str):
            return self.out["status"]
        return self.status


def _provider_name(spec: dict | KernelProvider) -> str:
    if isinstance(spec, KernelProvider):
        return spec.name
    try:
        return kernel_provider_from_dict(spec).name
    except Exception:  # noqa: BLE001 - the actor will report why it cannot be made
        return str(spec.get("type", "?"))


def _where(slot: Slot) -> tuple:
    info = slot.identity()
    return info.get("node"), info.get("gpu")


class RayForgeRunner(ForgeRunner):
    """A KernelOptimizer's benchmarks, generators and timings as tasks in executor's one schedule.

    executor: a RayExecutor (opened here if it is not yet). intent: "cuda" or "cpu", the device kind the
    actors use (None: the recorded samples' device). on_queue: called once, when the first tasks
    (generators, provider benchmarks) are queued. context: the module's TuneContext, when each task
    should be a progress event of the executor.
    """

    # This process is Ray's driver: after Kineto's CUPTI teardown it would hang at exit, its work done
    # (benchmarks/exit_check.py, torch 2.11 with Ray 2.60 on an H200). So a CUDA trace runs in a child
    # process (cluster.profile_process); only when that fails is it made here, and CUPTI then stays.
    teardown_cupti = False

    def __init__(self, executor, intent: str | None = None, on_queue: Callable[[], None] | None = None,
                 context=None, profile_child: ProfileChild | None = None):
        self.executor, self.intent, self.on_queue, self.context = executor, intent, on_queue, context
        self.profile_child = profile_child   # started ahead (PlanRun); else one is started when needed
        self._cancelled = threading.Event()
        self._schedule = None
        self._generation_timeout = 0.0
        self._sink: queue.Queue = queue.Queue()       # what the schedule says of this runner's requests
        self._requests: set[Request] = set()          # queued or running
        self._ended: dict[Request, Work] = {}         # ended, not yet waited for
        self._boxes: dict[str, list] = {}

    def cancel(self) -> None:
        """Stop a search running on another thread: it raises Cancelled."""
        self._cancelled.set()
        if self._schedule is not None:
            self._schedule.cancel(list(self._requests), "forge work no longer wanted")
        self._sink.put(("cancelled", None))   # wakes a wait that had nothing in flight

    def profile(self, opt, profiler, function, data, module):
        """A CUDA trace in a child process (cluster.profile_process); a CPU one here, as it needs no CUPTI."""
        if uses_cuda(module, data):
            child, self.profile_child = self.profile_child, None
            try:
                if child is None:
                    return profile_in_child(profiler, function, data, module, opt.warmup_iterations)
                return child.profile(profiler, function, data, module, opt.warmup_iterations)
            except ProfileProcessError as exc:
                logger.warning("%s; profiling in this process instead, which keeps CUDA's profiler attached to it "
                               "(each later kernel launch here costs more)", exc)
            finally:
                if child is not None:
                    child.close()
        return super().profile(opt, profiler, function, data, module)

    def open(self, opt) -> None:
        self.executor.open()
        self._schedule = self.executor.schedule
        self._generation_timeout = opt.generation_timeout
        self._sink = queue.Queue()   # a new one: what an earlier search's requests say is not this one's
        self._boxes, self._ended = {}, {}

    def close(self) -> None:
        """Stop whatever of this search is still queued or running (its actors are replaced, not counted as
        failures)."""
        if self._schedule is not None and self._requests:
            self._schedule.cancel(list(self._requests), "forge work no longer wanted")
        self._requests, self._ended, self._boxes = set(), {}, {}

    # ----- plain data out ---------------------------------------------------------------------------
    def _box(self, search: FunctionSearch) -> list:
        box = self._boxes.get(search.function)
        if box is None:
            if self.intent is None:
                self.intent = "cuda" if device_of(search.unique).type == "cuda" else "cpu"
            data = [(count, FunctionSample(*move((sample.args, sample.kwargs), "cpu")))
                    for count, sample in search.data]
            box = self._boxes[search.function] = [self.executor.put(data)]
        return box

    def _queued(self) -> None:
        """The first batch of tasks (generators, then provider benchmarks) is queued: tell on_queue, once."""
        if self.on_queue is not None:
            callback, self.on_queue = self.on_queue, None
            callback()

    # ----- the schedule's side ----------------------------------------------------------------------
    def _request(self, task: str, search: FunctionSearch, label: str, *args: Any, generator: bool = False,
                 prefer: tuple | None = None) -> Request:
        box = self._box(search)
        limit = self._generation_timeout if generator else self.executor.task_timeout_s
        return Request("forge", (task, box, self.intent, search.function, *args),
                       self.context.name if self.context is not None else "kernel forge", limit,
                       name=f"{task} {label}:{search.function}", payload=Work(task, search.function, label, generator),
                       urgent=True, rank=self._preferring(prefer), hold=self._room if generator else None,
                       from_dispatch=generator, failure_on_timeout=not generator, on_start=self._started,
                       sink=self._sink)

    def _submit(self, requests: list[Request]) -> list[Request]:
        if self._cancelled.is_set():
            raise Cancelled()
        self._requests.update(requests)
        self._schedule.submit(*requests)
        return requests

    def _preferring(self, where: tuple | None) -> Callable[[Slot], int | None] | None:
        """A slot rank for work that prefers the actor at where ((node, gpu)): only that one while it lives."""
        if where is None:
            return None
        pool = self._schedule.pool

        def rank(slot: Slot) -> int | None:
            if _where(slot) == where:
                return 0
            return None if any(_where(s) == where for s in pool.alive()) else 1

        return rank

    def _room(self) -> bool:
        """Whether a generator may start: generators leave at least one actor to the benchmarks when there
        are two or more (the schedule asks this on its loop, before each placement)."""
        running = sum(1 for r in list(self._requests) if r.payload.generator and r.state == "running")
        return running < max(1, len(self._schedule.pool.alive()) - 1)

    def _started(self, request: Request) -> None:
        self._emit(request.payload, EVENTS[request.payload.task][1], "running", request.task.where, 0.0)

    def _emit(self, work: Work, event: str, status: str, where: dict, elapsed_s: float) -> None:
        if self.context is not None:
            task = EVENTS[work.task][0]
            self.executor.emit(self.context, event, task=task, status=status, where=where, elapsed_s=elapsed_s,
                               key=f"{task}:{work.function}:{work.label}", backend=work.label, function=work.function)

    def _wait(self, requests: list[Request]) -> Iterator[Work]:
        """Yield each of requests' Work as it ends (in completion order)."""
        pending = list(requests)
        while pending:
            if self._cancelled.is_set():
                raise Cancelled()
            for request in [r for r in pending if r in self._ended]:
                pending.remove(request)
                yield self._ended.pop(request)
            if pending:
                self._take(*self._sink.get())

    def _take(self, what: str, request: Request | None) -> None:
        if what == "requeued":
            return
        if what == "cancelled" or request is None:
            raise Cancelled()
        if what == "error":   # a progress callback's Ctrl-C on the schedule's thread
            raise request.error
        self._requests.discard(request)
        work, task = request.payload, request.task
        if task is None:
            failure = outcome(work.what(), unrun=request.unrun or "no tuner actor is left")
        else:
            work.seconds, work.where = task.seconds, task.where
            limit = ("generation_timeout", self._generation_timeout) if work.generator else \
                ("task_timeout_s", self.executor.task_timeout_s)
            failure = outcome(work.what(), failure=task.failure, timed_out=task.timed_out, limit_s=limit[1],
                              limit_name=limit[0], replaced=True, log_path=task.log_path)
        if failure is None:
            work.out, work.status = task.out, OK
        else:
            work.status, work.error = failure.status, failure.error
        self._emit(work, "done", work.progress_status(), work.where, work.seconds)
        self._ended[request] = work

    # ----- benchmarks and generators -------------------------------------------------------------------
    def benchmark(self, opt, jobs: list[BenchmarkJob], searches: dict[str, FunctionSearch]):
        requests = {}
        for job in jobs:
            spec = job.provider if isinstance(job.provider, dict) else job.provider.to_dict()
            request = self._request("benchmark", searches[job.function], _provider_name(job.provider), spec,
                                    opt.tolerance, opt.measure.to_dict(), job.source)
            requests[request] = (job, spec)
        self._submit(list(requests))
        self._queued()
        jobs_of = {request.payload: pair for request, pair in requests.items()}
        for work in self._wait(list(requests)):
            job, spec = jobs_of[work]
            if work.status == OK:
                yield ProviderBenchmark.from_dict(work.out)
            else:
                yield ProviderBenchmark(job.function, work.label, work.status, provider=spec, source=job.source,
                                        error=work.error, gpu=work.where.get("gpu", ""),
                                        node=work.where.get("node", ""), seconds=work.seconds)

    def submit_generators(self, opt, searches: dict[str, FunctionSearch], functions: list[str]) -> list[Request]:
        requests = []
        for fn in functions:
            for generator in [g for g in opt.kernel_generators if fn in opt.functions_of(g)]:
                try:
                    spec = generator.to_dict()
                except Exception as exc:  # noqa: BLE001 - the generator's own serialization bug
                    opt.generation_failed(searches[fn], generator.name, ERROR,
                                          f"to_dict failed: {type(exc).__name__}: {exc}")
                    continue
                requests.append(self._request("generate", searches[fn], generator.name, spec, generator=True))
                logger.info("submitted %s for %s to the actors", generator.name, fn)
        return self._submit(requests)

    def collect_generated(self, opt, searches: dict[str, FunctionSearch], tasks: list[Request]) -> None:
        for work in self._wait(tasks):
            search = searches[work.function]
            if work.status != OK:
                opt.generation_failed(search, work.label, work.status, work.error, work.seconds)
                continue
            opt.take_generated(search, GenerationOutcome.from_dict(work.out), None, work.where)

    # ----- timings for the choice ---------------------------------------------------------------------
    def originals(self, opt, search: FunctionSearch, where: set) -> dict[tuple, ProviderBenchmark]:
        """The original timed on each (node, gpu) in where (on another actor where that one is gone)."""
        requests = self._submit([self._request("original", search, f"original F.{search.function}",
                                               opt.measure.to_dict(), prefer=identity)
                                 for identity in sorted(where)])
        found: dict[tuple, ProviderBenchmark] = {}
        for work in self._wait(requests):
            if work.status != OK:
                logger.warning("timing the original %s on %s failed: %s", search.function,
                               work.where.get("gpu", "?"), work.error)
                continue
            record = ProviderBenchmark.from_dict(work.out)
            search.records.append(record)
            if record.ok:
                found.setdefault((record.node, record.gpu), record)
        return found

    def interleaved(self, opt, search: FunctionSearch, finalists: list[ProviderBenchmark]) -> dict | None:
        """The original and finalists timed interleaved on one actor (the best's GPU where it lives)."""
        best = finalists[0]
        requests = self._submit([self._request("interleaved", search, f"re-measure of {search.function}",
                                               [r.provider for r in finalists], opt.final_rounds,
                                               prefer=(best.node, best.gpu))])
        work = next(self._wait(requests))
        if work.status != OK:
            logger.warning("the interleaved re-measure of %s failed: %s", search.function, work.error)
            return None
        return work.out


def RayKernelOptimizer(*args: Any, executor, intent: str | None = None, on_queue: Callable[[], None] | None = None,
                       context=None, **kwargs: Any) -> KernelOptimizer:
    """A KernelOptimizer whose tasks run on executor's actors (KernelOptimizer's arguments, plus the
    RayForgeRunner's)."""
    return KernelOptimizer(*args, runner=RayForgeRunner(executor, intent, on_queue, context), **kwargs)


# ----- jobs that need a plan before their build (Backend.plan_key), in a RayExecutor batch ---------------------

# One profile at a time in this process: two torch profilers open at once on two threads crash it (a CPU trace
# is made here; a CUDA one falls back to here when its child process fails).
_PROFILING = threading.Lock()


class PlanRun:
    """Makes the plan that jobs with one plan key share (Backend.planner of the first job's class; a
    KernelSelectorBackend's kernel plan) on the driver, its tasks on the actors (see the module docstring).

    ready: set once the driver's profiling is over (the forge has queued its first tasks) or the run ended.
    done: set when it ended; then outcome() gives each job carrying the plan, or each job's failed result.
    """

    def __init__(self, executor, context, jobs: list[CandidateJob], notify: Callable[[], None] | None = None):
        self.executor, self.context, self.jobs = executor, context, list(jobs)
        self.notify = notify   # called (on the plan's thread) when ready or done is set
        self.job = self.jobs[0]
        self.ready, self.done = threading.Event(), threading.Event()
        self.plan = None
        self.error: Exception | None = None
        self.started = self.seconds = 0.0
        self._planner: Planner | None = None
        self._class = None
        self._cancelled = False
        # On a GPU the profile is made in a child process (cluster.profile_process): start it now, so that its
        # start overlaps the driver's eager baseline instead of delaying the plan (and the builds on actors with
        # a GPU each, which wait for the profile).
        self._cuda = uses_cuda(context.module, context.samples)   # the runner's own rule (RayForgeRunner.profile)
        self._child = ProfileChild(str(module_device(context.module))) if self._cuda else None

    def start(self) -> None:
        """Profile, then search, on a thread of its own. The caller's thread goes on polling the pool meanwhile:
        on a GPU the profile is the child process's, and a caller blocked on it started no actor of a later
        wave (ActorPool) until it was over."""
        self.started = time.monotonic()
        threading.Thread(target=self._run, name=f"plan-{self.job.key}", daemon=True).start()

    def cancel(self) -> None:
        self._cancelled = True
        self._close_child()
        if self._planner is not None:
            self._planner.cancel()

    def _close_child(self) -> None:
        child, self._child = self._child, None
        if child is not None:   # unused: a CPU trace, a plan without samples, or the batch was cancelled
            child.close()

    def _profile(self) -> bool:
        """The profile (a CUDA trace in the child process, a CPU one here); False when it failed or the run
        was cancelled meanwhile."""
        ctx = self.context
        try:
            self._class = backend_class_of(self.job.spec)
            intent = "cuda" if torch.device(ctx.device).type == "cuda" else "cpu"
            self._planner = self._class.planner(self.job.spec, RayForgeRunner(
                self.executor, intent, on_queue=self._set_ready, context=ctx, profile_child=self._child))
            # A profile is no timing (its shares are CUDA kernels' own durations): beside actors that share its
            # GPU it holds a build's turn, so their builds go on meanwhile and only their timings wait for it.
            turns = turns_for(module_device(ctx.module), self._cuda and self.executor.actors_share_gpus())
            with _PROFILING, turns.building():
                self._planner.profile(ctx.module, ctx.samples)
        except Exception as exc:  # noqa: BLE001 - the plan's failure is this candidate's result
            if self._cancelled:   # _run ends the run
                logger.info("[%s] plan of %s cancelled while profiling", ctx.name, self.job.key)
            else:
                self._failed(exc)
            return False
        finally:
            self._close_child()
        return not self._cancelled

    def _set_ready(self) -> None:
        self.ready.set()
        if self.notify is not None:
            self.notify()

    def _end(self) -> None:
        self.ready.set()
        self.done.set()
        if self.notify is not None:
            self.notify()

    def _failed(self, exc: Exception) -> None:
        logger.error("[%s] the plan of %s failed: %s: %s", self.context.name, self.job.key, type(exc).__name__, exc)
        self.error = exc
        self.seconds = time.monotonic() - self.started
        self._end()

    def _run(self) -> None:
        ctx = self.context
        try:
            if not self._profile():
                return
            self.plan = self._planner.search()
            logger.info("[%s] plan of %s: %s", ctx.name, ", ".join(j.key for j in self.jobs), self.plan.describe())
        except Cancelled:
            logger.info("[%s] plan of %s cancelled", ctx.name, self.job.key)
        except Exception as exc:  # noqa: BLE001 - the plan's failure is this candidate's result
            logger.debug("plan of %s", self.job.key, exc_info=True)
            self._failed(exc)
        finally:
            self._end()

    def outcome(self) -> list[CandidateJob | BuildResult]:
        """After done: each job carrying the plan, to build; or each job's failed result; nothing when the
        run was cancelled."""
        if self.plan is not None:
            return [dataclasses.replace(j, spec=self._class.spec_with_plan(j.spec, self.plan)) for j in self.jobs]
        if self.error is None:
            return []
        return failed_plan(self.jobs, self.error, self.seconds, self.context.device)
