"""Deploying a decision, and the post-deploy check.

deploy() turns the chosen result into a live backend on the driver (a batch-size dispatch from its
members). check_deployed() then times the user's wrapped Module against eager, in paired interleaved
rounds, as a user would call it: what was measured (possibly on an actor, possibly before a restore)
must also be what runs. When the deployed module loses to eager at a recorded batch size beyond
noise, the next candidate that passed is deployed and checked, else eager; the report says so.

The first choice holds unless its check shows that loss: it won the decision rule, and an undecided
check is no evidence against it. A candidate deployed after a loss must win its own check outright.
The loss says that what the re-measure saw no longer holds (the host's speed moved, or what was
restored differs), and the next candidate's win came from that same re-measure.
"""

from __future__ import annotations

import logging

import torch

from aitune_ray.backend.backend import Backend, class_path
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend, BatchDispatchConfig
from aitune_ray.measure.conditions import CUPTI_NOTE, cupti_attached
from aitune_ray.measure.timing import MeasureConfig, profile_side_by_side
from aitune_ray.results import BuildResult
from aitune_ray.tune_strategy.performance_validation import LOSS, WIN, GateOutcome, judge, series

logger = logging.getLogger(__name__)

DISPATCH = BatchDispatchBackend.__name__
HOLDS = "holds"      # the post-deploy check's verdict when the deployed module loses nowhere beyond noise


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


def skip_reason(backend: Backend | None) -> str:
    """Why the deployed module cannot be timed here ("" when it can)."""
    if backend is None:
        return "eager kept"
    device = backend.device
    if getattr(backend, "result_key", None) is not None or (
            device is not None and device.type == "cuda" and not torch.cuda.is_available()):
        return ("skipped: this driver has no GPU to run the deployed module on; the checkpoint is checked "
                "where it is loaded")
    return ""


def deployed_reason(outcome: GateOutcome) -> str:
    """The post-deploy check's words for outcome. The decision rule words an undecided interval for a choice
    among candidates ("inconclusive, eager kept", "not shown faster"); after deployment only a loss beyond
    noise changes anything, so there the deployed backend stays and the words say that."""
    if outcome.verdict in (WIN, LOSS):
        return outcome.reason
    return f"{HOLDS}, not slower than eager beyond noise: {outcome.detail or outcome.reason}"


def time_deployed(module, eager, samples, device, rounds: int,
                  config: MeasureConfig | None = None) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """(eager's, the deployed module's) per-round ms per call at each recorded batch size, paired by index:
    the wrapped module, called as the user calls it, against eager in paired interleaved rounds."""
    mix = samples.call_mix()
    timed = profile_side_by_side({"eager": eager, "deployed": module}, samples, device, rounds, config)
    return series(timed["eager"], mix), series(timed["deployed"], mix)


def check_deployed(module, eager, samples, device, strategy, rounds: int,
                   config: MeasureConfig | None = None) -> GateOutcome:
    """Paired rounds of the wrapped module (as deployed) against eager; the outcome of the decision rule."""
    eager_ms, deployed_ms = time_deployed(module, eager, samples, device, rounds, config)
    return _rule(eager_ms, deployed_ms, samples.call_mix(), strategy)


def _rule(eager_ms, deployed_ms, mix, strategy) -> GateOutcome:
    return judge(eager_ms, deployed_ms, mix, paired=True, enabled=True,
                 min_speedup_ratio=strategy.min_speedup_ratio, noise_tolerance=strategy.noise_tolerance)


def both_measurements(report, result: BuildResult, eager_ms, deployed_ms, strategy) -> GateOutcome | None:
    """The deployed backend's speedup over the re-measure's paired rounds and the post-deploy check's together,
    or None where the re-measure kept no paired rounds of it.

    The two were taken at different times, and the host's state moves a host-bound speedup between them (by
    10% or more at 7 of 16 tunings and batch sizes of benchmarks/decisions.py on an H200): their rounds pooled
    estimate what a later timing, a user's, will read better than either alone; as many rounds are taken from
    each (the re-measure's latest), so that each reading counts alike. Only for a backend that the
    re-measure timed as the very object deployed (the inline executor): a Ray driver deploys its own restore
    of what an actor timed, and there the check alone speaks for the deployed module. The decision stays with
    the re-measure, taken before anything was deployed."""
    mix = report.call_mix
    if not report.remeasured_baseline or set(result.remeasured) != set(mix):
        return None
    first_eager, first_deployed = series(report.remeasured_baseline, mix), series(result.remeasured, mix)
    pooled_eager, pooled_deployed = {}, {}
    for bs in mix:
        paired = min(len(first_eager[bs]), len(first_deployed[bs]))   # the re-measure's rounds, paired by index
        # as many rounds from each reading, the re-measure's latest: each time the host was read counts alike
        n = min(paired, len(eager_ms[bs]))
        pooled_eager[bs] = first_eager[bs][paired - n:paired] + list(eager_ms[bs][-n:])
        pooled_deployed[bs] = first_deployed[bs][paired - n:paired] + list(deployed_ms[bs][-n:])
    return _rule(pooled_eager, pooled_deployed, mix, strategy)


def deploy_checked(module, executor, context, report, strategy) -> None:
    """Deploy report.chosen into module, check it, and fall back (next candidate, else eager) on a loss."""
    rounds = getattr(strategy, "deploy_check_rounds", 0)
    tried: set[str] = set()
    result = report.chosen_result()
    while result is not None:
        tried.add(result.key)
        backend = deploy(executor, context, report, result)
        module.use_backend(backend)
        why = ("skipped: deploy_check_rounds is 0" if rounds <= 0 else
               "skipped: performance validation off" if not strategy.performance_validation else skip_reason(backend))
        if why:
            report.deploy_checks.append({"key": result.key, "backend": result.backend, "verdict": why})
            return
        eager_ms, deployed_ms = time_deployed(module, context.module, context.samples, context.device, rounds,
                                              context.measure)
        outcome = _rule(eager_ms, deployed_ms, context.samples.call_mix(), strategy)
        fallback = len(tried) > 1
        # The first choice: only a loss beyond noise counts, an undecided interval still means it holds.
        # A fallback (see the module docstring): only a win does.
        holds = outcome.verdict == WIN if fallback else outcome.verdict != LOSS
        entry = {"key": result.key, "backend": result.backend,
                 "verdict": HOLDS if holds else outcome.verdict, "rule": outcome.verdict,
                 "reason": outcome.reason if fallback else deployed_reason(outcome), **_figures(outcome)}
        # pooled only where the re-measure timed this very object here: a Ray driver's restore was not timed
        pooled = (both_measurements(report, result, eager_ms, deployed_ms, strategy)
                  if getattr(executor, "deploys_what_it_measured", False) else None)
        if pooled is not None:
            entry["both"] = _figures(pooled)
        if cupti_attached():
            entry["note"] = CUPTI_NOTE
        report.deploy_checks.append(entry)
        if holds:
            logger.info("[%s] post-deploy check of %s: %s", context.name, result.backend, entry["reason"])
            return
        following = _next_candidate(report, tried)
        entry["fell_back_to"] = following.backend if following is not None else "eager"
        logger.warning("[%s] deployed %s %s: falling back to %s", context.name, result.backend,
                       "loses to eager" if outcome.verdict == LOSS else "does not win after the first choice lost",
                       entry["fell_back_to"])
        what = (f"deployed {result.backend} {outcome.reason}" if not fallback else
                f"{result.backend}, deployed after that loss, must win its own check and did not ({outcome.reason})")
        report.decision += f"; post-deploy check: {what}, so {entry['fell_back_to']} is used instead"
        report.chosen = following.key if following is not None else None
        result = following
    module.use_backend(None)


def _figures(outcome: GateOutcome) -> dict:
    """The speedup of outcome as plain data: over the mix, its interval, and the interval at each batch size."""
    return {"speedup": outcome.mix_speedup, "interval": outcome.interval.to_dict() if outcome.interval else None,
            "intervals": {bs: i.to_dict() for bs, i in outcome.intervals.items()}}


def _next_candidate(report, tried: set[str]) -> BuildResult | None:
    """The fastest not yet tried of those the decision rule passed."""
    passed = [r for r in report.results if r.key not in tried and r.ok
              and (report.verdicts.get(r.key) or {}).get("passed")]
    return max(passed, key=lambda r: report.speedups.get(r.key, 0.0), default=None)
