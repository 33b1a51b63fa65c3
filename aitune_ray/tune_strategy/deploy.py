"""Deploying a decision, and the post-deploy timing.

deploy() turns the chosen result into a live backend on the driver (a batch-size dispatch from its
members). deploy_checked() deploys the choice and then times the user's wrapped Module against eager in paired
shuffled rounds, as a user would call it, in the serving context, for the report: information only, judged
against the decision's own interval (aitune_ray.decision.agreement), never shown as the answer. The decision was the confirm
session's (aitune_ray.decision), which timed the finalists as deployed; a later timing is another moment, and
deciding again on it would be deciding on numbers from different moments. Modules tuned at once deploy at
once (a restore may take long: an engine to load); only their post-deploy timings, on this driver's one
device, take turns (DRIVER_TIMING).
"""

from __future__ import annotations

import logging
import threading

import torch

from aitune_ray.backend.backend import Backend, class_path
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend, BatchDispatchConfig
from aitune_ray.decision.rule import Rule, judge
from aitune_ray.decision.verdict import Judgement
from aitune_ray.measure.conditions import CUPTI_NOTE, cupti_attached
from aitune_ray.decision.agreement import AGREES, agreement
from aitune_ray.measure.request import TimingRequest
from aitune_ray.records.results import BuildResult

logger = logging.getLogger(__name__)

DISPATCH = BatchDispatchBackend.__name__
DRIVER_TIMING = threading.Lock()   # no two modules' post-deploy timings on the driver's device at once


def is_dispatch(result: BuildResult) -> bool:
    return result.spec.get("type") == class_path(BatchDispatchBackend)


def deploy(executor, context, report, result: BuildResult) -> Backend:
    """A live backend for result: the executor's materialization, or a dispatch over its members'."""
    if not is_dispatch(result):
        return executor.materialize(context, result)
    config = BatchDispatchConfig.from_dict(result.spec["config"])
    by_key = {r.key: r for r in report.results}
    members = {key: executor.materialize(context, by_key[key]) for key in config.members}
    device = next((m.device for m in members.values() if m.device is not None), context.device)
    return BatchDispatchBackend.assemble(context.module, members, config.routes, device)


def skip_reason(backend: Backend | None, device: torch.device | None = None) -> str:
    """Why the deployed module cannot be timed here, on device, the one it was tuned for ("" when it can)."""
    if backend is None:
        return "eager kept"
    devices = [d for d in (backend.device, device) if d is not None]
    if getattr(backend, "result_key", None) is not None or (
            any(torch.device(d).type == "cuda" for d in devices) and not torch.cuda.is_available()):
        return ("skipped: this driver has no GPU to run the deployed module on; the checkpoint is checked "
                "where it is loaded")
    return ""


def time_deployed(module, eager, samples, request: TimingRequest, strategy) -> tuple[Judgement, str]:
    """The wrapped module, called as the user calls it, against eager as request says (paired shuffled
    rounds): (its speedup with intervals by the decision's rule for one candidate, the context it was measured
    in, described). Information: nothing is decided on it."""
    session = request.run({"eager": eager, "deployed": module}, samples)
    rule = Rule(strategy.min_speedup_ratio, strategy.noise_tolerance, getattr(strategy, "alpha", 0.05))
    return (judge("deployed", session.rounds_ms("eager"), session.rounds_ms("deployed"), samples.call_mix(), rule, 1),
            session.describe())


def judged_check(report, key: str, timed: Judgement, checked_in: str, tolerance: float) -> dict:
    """A check's figures with its agreement with the decision's interval for key (decision.agreement, within
    the strategy's noise tolerance)."""
    decided = (report.verdicts.get(key) or {}).get("interval") if report is not None else None
    found = agreement(decided, timed.interval, getattr(report, "measured_in", ""), checked_in, tolerance)
    return {"speedup": timed.median, "interval": timed.interval, "intervals": timed.intervals,
            "measured_in": checked_in, "agreement": found["verdict"], "reason": found["text"]}


def deploy_checked(module, executor, context, report, strategy) -> None:
    """Deploy report.chosen into module (eager when None), then time it as deployed for the report."""
    result = report.chosen_result()
    if result is None:
        if any(r.ok for r in report.results):
            module.keep_eager()   # TUNED, eager as the backend (AITune returns its eager baseline); report says why
        else:
            module.stay_eager(report.decision or "no candidate built and passed")   # AITune raises here
        return
    with module.unpatched():   # a restore that traces or compiles sees the module as it was
        backend = deploy(executor, context, report, result)
        module.use_backend(backend)
    rounds = getattr(strategy, "deploy_check_rounds", 0)
    why = ("skipped: deploy_check_rounds is 0" if rounds <= 0 else
           "skipped: performance validation off" if not strategy.performance_validation else
           skip_reason(backend, context.device))
    entry = {"key": result.key, "backend": result.backend}
    if why:
        report.deploy_checks.append({**entry, "verdict": why})
        return
    try:
        with DRIVER_TIMING:
            timed, checked_in = time_deployed(module, module.eager_call, context.samples,
                                              context.timing("deploy", rounds), strategy)
    except Exception as exc:  # information only: the deployment stands
        logger.warning("[%s] the post-deploy timing failed: %s: %s", context.name, type(exc).__name__, exc)
        report.deploy_checks.append({**entry, "verdict": f"timing failed: {type(exc).__name__}: {exc}"})
        return
    entry.update(verdict="timed", **judged_check(report, result.key, timed, checked_in, strategy.noise_tolerance))
    if cupti_attached():
        entry["note"] = CUPTI_NOTE
    report.deploy_checks.append(entry)
    log = logger.info if entry["agreement"] == AGREES else logger.warning
    log("[%s] %s as deployed, over the recorded mix: %s", context.name, result.backend, entry["reason"])
