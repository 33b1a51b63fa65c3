"""The words of a decision: a typed verdict (aitune_ray.decision.verdict) in sentences for the report."""

from __future__ import annotations

from aitune_ray.decision.objective import BUDGET, LATENCY
from aitune_ray.decision.verdict import (CONFIRM_FAILED, DISPATCH, FASTER, HOST_UNFIT, INCONCLUSIVE, NO_CANDIDATE,
                                         NOT_FASTER, OVER_BUDGET, SLOWER, VALIDATION_OFF, Judgement, Verdict)


def interval_text(i: dict) -> str:
    return f"{i['median']:.3f}x [{i['low']:.3f}, {i['high']:.3f}]"


# Performance validation in DIAGNOSTIC mode: the comparison with eager is measured and reported, not used.
DIAGNOSTIC = "performance validation diagnostic"
NOT_USED = "reported, not used for the choice"


def unmeasured_text() -> str:
    """A candidate taken with performance validation DISABLED (not compared with eager at all)."""
    return f"performance {VALIDATION_OFF}: not compared with eager"


def diagnostic_failed_text(verdict: Verdict) -> str:
    """A candidate taken in DIAGNOSTIC mode whose comparison with eager could not be measured (the confirm
    session failed): the comparison does not decide, so it is taken all the same."""
    return f"{DIAGNOSTIC}: not measured ({verdict.kind}: {verdict.why}); {NOT_USED}"


def judgement_text(j: Judgement, verdict: Verdict, diagnostic: bool = False) -> str:
    """One finalist's judgement: its kind, with the figures that decided it. diagnostic: performance
    validation is in DIAGNOSTIC mode (a VALIDATION_OFF verdict's figures are reported, not used)."""
    gate, floor = 1.0 + verdict.min_speedup_ratio, 1.0 - verdict.noise_tolerance
    where = (f"{interval_text(j.interval)} over the recorded mix, {j.interval['rounds']} paired rounds, "
             f"{verdict.confidence:.1%} intervals (K={verdict.finalists})")
    if diagnostic and verdict.kind == VALIDATION_OFF:
        return f"{DIAGNOSTIC}: {where}; the accept rule reads it as {j.kind}; {NOT_USED}"
    if j.kind == FASTER:
        return f"{FASTER}: {where}; lower bounds at least {gate:.3f}x over the mix and {floor:.3f}x at every batch size"
    if j.kind == SLOWER:
        sizes = ", ".join(f"bs {bs} ({interval_text(i)})" for bs, i in sorted(j.intervals.items())
                          if i["high"] < floor)
        wins = ", ".join(f"bs {bs} ({interval_text(i)})" for bs, i in sorted(j.intervals.items()) if i["low"] >= gate)
        return (f"{SLOWER}: {f'wins at {wins} but ' if wins else ''}slower than eager at {sizes}, beyond the "
                f"{verdict.noise_tolerance:.0%} noise tolerance")
    if j.kind == NOT_FASTER:
        return f"{NOT_FASTER}: {where}; needs {gate:.3f}x"
    if j.kind == VALIDATION_OFF:
        return f"performance {VALIDATION_OFF}: {where}"
    parts = []
    if j.interval["low"] < gate:
        short = [bs for bs, i in sorted(j.intervals.items()) if i["low"] < gate and bs not in j.below]
        parts.append(f"the interval over the mix includes {gate:.3f}x" + (" (not shown faster at " + ", ".join(
            f"bs {bs} ({interval_text(j.intervals[bs])})" for bs in short) + ")" if short else ""))
    if j.below:
        parts.append("not shown at least " + f"{floor:.3f}x at " + ", ".join(
            f"bs {bs} ({interval_text(j.intervals[bs])})" for bs in j.below))
    return f"{INCONCLUSIVE}: {where}; " + " and ".join(parts) + f"; per-round spread (IQR/median) {j.spread:.0%}"


def figures_text(verdict: Verdict, key: str) -> str:
    """A callable's figures of a latency objective in the confirm session ("" for the speedup objective)."""
    f = verdict.figures.get(key)
    kind = (verdict.objective or {}).get("kind")
    if not f:
        return ""
    if kind == LATENCY:
        return f"{f['latency_ms']:.3f} ms per call at bs {f['batch_size']}"
    if kind == BUDGET:
        if f["batch_size"] is None:
            return "over the budget at every recorded batch size (" + ", ".join(
                f"bs {bs}: {ms:.3f} ms" for bs, ms in f["latency_by_bs"]) + ")"
        return f"{f['throughput']:.1f} samples/s at bs {f['batch_size']} ({f['latency_ms']:.3f} ms per call)"
    return ""


def _objective_clause(verdict: Verdict, key: str) -> str:
    """Why the chosen one, by the objective: its figure beside eager's ("" for the speedup objective)."""
    kind = (verdict.objective or {}).get("kind")
    if kind not in (LATENCY, BUDGET) or key not in verdict.figures:
        return ""
    eager = figures_text(verdict, "eager")
    what = ("the lowest latency" if kind == LATENCY else
            f"the highest throughput within the {verdict.objective['latency_budget_ms']:g} ms latency budget")
    return f" ({what}: {figures_text(verdict, key)}; eager {eager})" if eager else f" ({what}: {figures_text(verdict, key)})"


def decision_text(verdict: Verdict, names: dict[str, str], diagnostic: bool = False) -> str:
    """The decision in one sentence. names: key -> the backend's name. diagnostic: as in judgement_text."""
    def name(key):
        return "eager" if key is None else names.get(key, key)

    if verdict.kind == OVER_BUDGET:
        budget = (verdict.objective or {}).get("latency_budget_ms")
        judged = "; ".join(f"{name(k)}: {figures_text(verdict, k)}" for k in verdict.judgements if k != DISPATCH)
        return (f"no backend meets the latency budget of {budget:g} ms (the median time per call in the confirm "
                f"session, at any recorded batch size): {judged}; eager: {figures_text(verdict, 'eager')}"
                + _pruned(verdict, names))

    if verdict.kind == NO_CANDIDATE:
        return f"kept eager: {verdict.why}" + _pruned(verdict, names)
    if verdict.kind == CONFIRM_FAILED:
        return f"kept eager: {CONFIRM_FAILED} ({verdict.why}); nothing is decided on numbers from other moments"
    if verdict.kind == HOST_UNFIT and verdict.why:   # the A/A guard on eager's own spread says why itself
        return f"kept eager: {HOST_UNFIT}: {verdict.why}"
    if verdict.kind == HOST_UNFIT:
        return (f"kept eager: {HOST_UNFIT}: eager called through the candidates' path (the A/A control) read "
                f"{interval_text(verdict.control.interval)} against eager's own call on {verdict.where or 'this host'}, "
                f"outside 1 +- {verdict.noise_tolerance:.0%}: the path a call is made through moves its speed more "
                "than the effects being judged (on a CPU, the calling thread's OpenMP team under load)")
    if verdict.chosen == DISPATCH:
        routes = ", ".join(f"bs {bs}: {name(k)}" for bs, k in sorted(verdict.routes.items()))
        return f"chose a batch-size dispatch ({routes}): {judgement_text(verdict.judgements[DISPATCH], verdict)}"
    if verdict.kind == VALIDATION_OFF and verdict.chosen is not None:
        j = verdict.judgements[verdict.chosen]
        by = _objective_clause(verdict, verdict.chosen)
        if diagnostic:
            return (f"chose {name(verdict.chosen)}{by or ', the fastest in the confirm session'}: "
                    f"{judgement_text(j, verdict, diagnostic)}")
        return (f"chose {name(verdict.chosen)}{by}: performance {VALIDATION_OFF}, "
                f"{'its speedup' if by else 'the fastest in the confirm session'} "
                f"({interval_text(j.interval)} over the recorded mix)")
    if verdict.chosen is not None:
        return (f"chose {name(verdict.chosen)}{_objective_clause(verdict, verdict.chosen)}: "
                f"{judgement_text(verdict.judgements[verdict.chosen], verdict)}")
    if not verdict.judgements:
        return f"kept eager: {verdict.kind}: {verdict.why}" + _pruned(verdict, names)
    kind = NOT_FASTER if verdict.kind == NOT_FASTER else f"{INCONCLUSIVE} (per-round spread up to {verdict.spread():.0%})"
    budget = (verdict.objective or {}).get("latency_budget_ms")
    if budget is not None:   # the budget's figures beside each judgement: accepted but over the budget is said
        judged = "; ".join(f"{name(k)}: {judgement_text(j, verdict)}; {figures_text(verdict, k)}"
                           for k, j in verdict.judgements.items() if k != DISPATCH)
        return (f"kept eager: no backend within the {budget:g} ms latency budget is accepted ({kind}): {judged}"
                + _pruned(verdict, names))
    judged = "; ".join(f"{name(k)}: {judgement_text(j, verdict)}" for k, j in verdict.judgements.items()
                       if k != DISPATCH)
    return f"kept eager: {kind}: {judged}" + _pruned(verdict, names)


def _pruned(verdict: Verdict, names: dict[str, str]) -> str:
    if not verdict.pruned:
        return ""
    return " (" + "; ".join(f"{names.get(k, k)}: {why}" for k, why in verdict.pruned.items()) + ")"
