"""TimingCalls: a RayExecutor's timing sessions in the job's schedule: a module's eager baseline (on an actor,
or on the driver with the one actor held idle) and its confirm session (on the driver that holds the target
GPU, else on one actor). Each is a timing Request, which the schedule runs before any build and alone on its
actor. A part of RayExecutor (aitune_ray.cluster.ray_executor), made from the executor's other parts and
options that it needs, each passed to it.
"""

from __future__ import annotations

import collections
import logging
import platform
import time
from pathlib import Path
from typing import Callable

from aitune_ray.cluster.boxes import Boxes, intent
from aitune_ray.cluster.driver_gpu import DriverGpu
from aitune_ray.cluster.restores import Restores, outbound
from aitune_ray.cluster.schedule import Request
from aitune_ray.cluster.session import RaySession
from aitune_ray.decision.session import Session
from aitune_ray.runtime.device import gpu_identity
from aitune_ray.errors import BuildError
from aitune_ray.worker.seam import TuneContext
from aitune_ray.records.failures import classify, outcome
from aitune_ray.measure.timing import Timing
from aitune_ray.measure.turns import turns_for
from aitune_ray.records.results import ERROR, BuildResult
from aitune_ray.worker.core import confirm_session, confirmed, finalist

logger = logging.getLogger(__name__)


def remeasure_rank(results: list[BuildResult]):
    """A slot's rank for re-measuring results (lower first): the actor that built most of them on the GPU that
    measured most (it restores fewest), then the other actors on that GPU, then any."""
    best = collections.Counter((r.node, r.gpu) for r in results).most_common(1)[0][0]
    holders = collections.Counter(r.log_path for r in results if r.log_path and (r.node, r.gpu) == best)
    holder = holders.most_common(1)[0][0] if holders else ""

    def rank(slot) -> int:
        info = slot.identity()
        return 0 if holder and slot.log_path == holder else 1 if (info.get("node"), info.get("gpu")) == best else 2

    return rank


class TimingCalls:
    """The timing sessions of session's schedule.

    session, driver_gpu, boxes, restores: the executor's parts (the pool and schedule; whether the driver times
    on its own GPU; the modules' refs; the finalists restored on the driver). emit: the executor's progress
    events (Executor.emit). task_timeout_s, remeasure_rounds: RayExecutor's arguments of those names."""

    def __init__(self, session: RaySession, driver_gpu: DriverGpu, boxes: Boxes, restores: Restores,
                 emit: Callable[..., dict], task_timeout_s: float, remeasure_rounds: int):
        self.session, self.driver_gpu, self.boxes, self.restores = session, driver_gpu, boxes, restores
        self.emit = emit
        self.task_timeout_s, self.remeasure_rounds = task_timeout_s, remeasure_rounds
        self._baselines: dict[str, Request] = {}   # module name -> its eager baseline, queued by queue_baseline

    def queue_baseline(self, context: TuneContext) -> bool:
        """Queue the module's eager baseline ahead of its builds (RayExecutor.submit_early): on the first idle
        actor, or on the driver with the one actor held idle. While a local Ray is still starting and the
        driver times eager, nothing is queued and this returns False (the builds queue when iterated)."""
        on_driver = self.driver_gpu.times(context)
        if not self.session.made and on_driver:   # Ray is still starting: eager is timed now, the builds follow
            placeholder = Request("baseline", (), context.name, 0.0, on_driver=True, timing=True, state="placeholder")
            placeholder.started.set()
            self._baselines[context.name] = placeholder
            return False
        request = self._baseline_request(context, on_driver)
        self._baselines[context.name] = request
        self.session.schedule.submit(request)
        return True

    def clear(self) -> None:
        """Forget the baselines queued and not taken (the session closes)."""
        self._baselines.clear()

    def _run(self, request: Request, what: str):
        """One call through the job's schedule, under task_timeout_s; a dead or stuck actor is replaced and
        this raises BuildError."""
        task = self.session.schedule.wait(request).task
        if task is None:
            failure = outcome(what, unrun=request.unrun or "it was cancelled")
        else:
            failure = outcome(what, failure=task.failure, timed_out=task.timed_out, limit_s=self.task_timeout_s,
                              limit_name="task_timeout_s", replaced=True, log_path=task.log_path)
        if failure is None:
            return task.out
        where = f"; log: {task.log_path}" if task is not None and task.log_path and \
            (failure.worker_lost or task.timed_out) else ""
        raise BuildError(failure.error + where) from failure.cause

    def _baseline_request(self, context: TuneContext, on_driver: bool = False) -> Request:
        return Request("baseline", (context.name, self.boxes.box(context), intent(context),
                                   context.timing("baseline").to_dict()),
                       context.name, self.task_timeout_s, name=f"baseline {context.name}", timing=True,
                       on_cpu=intent(context) == "cpu", on_driver=on_driver)

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        """Eager timed on one actor: the request queue_baseline() queued ahead of the module's builds, else a new
        one; or on the driver, with one actor held idle meanwhile (see RayExecutor.submit_early)."""
        request = self._baselines.pop(context.name, None) or self._baseline_request(context)
        if request.state == "new":
            self.session.schedule.submit(request)
        started, status, where = time.monotonic(), ERROR, {}
        try:
            if request.on_driver:
                while not request.started.wait(5.0):   # the one actor is idle: nothing else runs on the GPU
                    pass
                where = {"node": platform.node(), "gpu": f"driver ({gpu_identity(context.device)})"}
                self.emit(context, "measuring", task="baseline", where=where, samples=len(context.samples),
                          batch_sizes=context.samples.batch_sizes())
                logger.info("[%s] timing eager on the driver's GPU while the tuner actor starts", context.name)
                with turns_for(context.device, self.session.actors_share_gpus()).timing():
                    session = context.timing("baseline").run({"eager": context.module}, context.samples,
                                                             context.device)
                data = session.plain("eager")
            else:
                while not request.started.wait(5.0):
                    pass
                where = request.slot.identity() if request.slot is not None else {}
                self.emit(context, "measuring", task="baseline", where=where, samples=len(context.samples),
                          batch_sizes=context.samples.batch_sizes())
                data = self._run(request, f"eager baseline of {context.name}")
            status = "ok"
        finally:
            if request.state == "placeholder":   # never in the schedule: nothing here waits for Ray's start
                pass
            elif request.on_driver:
                self.session.schedule.release(request)
            elif request.state != "ended":
                self.session.schedule.cancel([request], "the baseline was abandoned")
            self.emit(context, "done", task="baseline", status=status, where=where,
                      elapsed_s=time.monotonic() - started)
        return {int(bs): Timing.from_dict(t) for bs, t in data.items()}

    def confirm(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session (aitune_ray.decision): on this driver when it holds the target GPU (where it times
        eager itself, see DriverGpu.times), with each finalist restored here as materialize() then deploys it
        (the very objects), one actor held idle meanwhile; else on one actor, the one that built most
        finalists (which restores fewest). A session that fails (a finalist's restore aside) keeps eager; one
        whose actor died is run once more, whole, on another."""
        if not results:
            return Session.failure("no finalists")
        self.session.schedule.hand_on(context.name)   # the actors of this module's results it has taken
        if self.driver_gpu.times(context):
            return self._confirm_on_driver(context, results)
        identities = collections.Counter((r.node, r.gpu) for r in results)
        payload = [{**finalist(r), "artifacts": outbound(context, r)} for r in results]
        rank = remeasure_rank(results)
        for attempt in (1, 2):   # an actor that died in the session was replaced: a whole new session, elsewhere
            request = Request("confirm", (context.name, self.boxes.box(context), intent(context), payload,
                                          context.timing("confirm", self.remeasure_rounds).to_dict()), context.name,
                              self.task_timeout_s, name=f"confirm {context.name}", timing=True,
                              on_cpu=intent(context) == "cpu", rank=rank if attempt == 1 else None)
            self.session.schedule.submit(request)
            while not request.started.wait(5.0):
                pass
            where = request.slot.identity() if request.slot is not None else {}
            started = time.monotonic()
            self.emit(context, "remeasuring", task="remeasure", where=where, finalists=[r.key for r in results])
            try:
                out = self._run(request, f"confirm session of {context.name}")
                break
            except BuildError as exc:
                self.emit(context, "done", task="remeasure", status=ERROR, where=where,
                          elapsed_s=time.monotonic() - started)
                lost = exc.__cause__ is not None and classify(exc.__cause__).worker_lost
                # (the text, not the exception: a kept log record would keep its frames and their locals)
                if attempt == 2 or not lost or not self.session.pool.alive():
                    return Session.failure(str(exc), " ".join(str(v) for v in where.values() if v))
                logger.warning("[%s] the confirm session's actor was lost; a new session on another: %s",
                               context.name, str(exc))
        self.emit(context, "done", task="remeasure", status="error" if out.get("failed") else "ok", where=where,
                  elapsed_s=time.monotonic() - started)
        logger.info("[%s] confirm session of %d finalists from %d GPUs on %s %s", context.name, len(results),
                    len(identities), out.get("node"), out.get("gpu"))
        return confirmed(results, out)

    def _confirm_on_driver(self, context: TuneContext, results: list[BuildResult]) -> Session:
        """The confirm session on this driver, on finalists restored here and kept for materialize(), with one
        actor held idle (nothing else runs on the GPU meanwhile)."""
        request = Request("confirm", (), context.name, self.task_timeout_s, name=f"confirm {context.name}",
                          timing=True, on_cpu=intent(context) == "cpu", on_driver=True)
        self.session.schedule.submit(request)
        where = {"node": platform.node(), "gpu": f"driver ({gpu_identity(context.device)})"}
        started = time.monotonic()
        try:
            while not request.started.wait(5.0):
                pass
            self.emit(context, "remeasuring", task="remeasure", where=where, finalists=[r.key for r in results])
            backends, errors = {}, {}
            for r in results:
                try:
                    backends[r.key] = self.restores.held(context, r)
                except Exception as exc:  # noqa: BLE001 - that finalist is left out, the others stand
                    logger.exception("[%s] cannot restore %s for the confirm session", context.name, r.key)
                    errors[r.key] = f"{type(exc).__name__}: {exc}"
            try:
                with turns_for(context.device, self.session.actors_share_gpus()).timing():
                    out = confirm_session(context.module, context.samples, context.device, backends,
                                          context.timing("confirm", self.remeasure_rounds),
                                          Path(context.workdir) / "control")
            finally:
                for backend in backends.values():
                    backend.deactivate()
        finally:
            self.session.schedule.release(request)
        out.update(errors=errors, node=where["node"], gpu=where["gpu"])
        self.emit(context, "done", task="remeasure", status="error" if out.get("failed") else "ok", where=where,
                  elapsed_s=time.monotonic() - started)
        return confirmed(results, out)
