"""The verdict of one confirm session: the accept rule on every finalist, the A/A check, the winner, and the
batch-size dispatch, all on that session's rounds and nothing else."""

from __future__ import annotations

from aitune_ray.decision.objective import SPEEDUP, Objective
from aitune_ray.decision.rule import Rule, control_fits, eager_spread, judge
from aitune_ray.measure.timing import MIX
from aitune_ray.decision.session import Session
from aitune_ray.decision.verdict import (CONFIRM_FAILED, DISPATCH, FASTER, HOST_UNFIT, INCONCLUSIVE, NO_CANDIDATE,
                                         NOT_FASTER, OVER_BUDGET, VALIDATION_OFF, Verdict)


def decide(session: Session | None, finalists: list[str], mix: dict[int, int], rule: Rule, *,
           dispatch: bool = False, screened: dict | None = None, pruned: dict | None = None,
           family: int = 0, objective: Objective | None = None) -> Verdict:
    """The decision on session for finalists (best first by screening). dispatch: each batch size may go to
    the best candidate accepted at that size; the composite is then judged by the same rule, as one more
    hypothesis (K counts it), and chosen over the single winner when its median over the mix is higher.
    family: K at least this (a strategy that confirms candidates one session at a time, FirstWins, counts
    every candidate it may confirm). objective: what the winner maximizes among the accepted candidates, and
    which of them may win (decision.objective; default: the median speedup over the mix, every one)."""
    objective = objective or Objective()

    def verdict(chosen, kind, **extra) -> Verdict:
        return Verdict(chosen, kind, screened=dict(screened or {}), pruned=dict(pruned or {}),
                       min_speedup_ratio=rule.min_speedup_ratio, noise_tolerance=rule.noise_tolerance,
                       objective=objective.to_dict(), **extra)

    if not finalists:
        if pruned:   # screened slower than eager, paired on one device at one moment: shown not faster
            return verdict(None, NOT_FASTER, why="every candidate was slower than eager at its screening")
        return verdict(None, NO_CANDIDATE, why="no candidate built correctly")
    if session is None or session.failed:
        return verdict(None, CONFIRM_FAILED, where=session.where if session else "",
                       why=session.failed if session else "no confirm session ran")
    timed = [k for k in finalists if k in session.candidates]
    errors = {k: session.errors.get(k, "not timed in the confirm session") for k in finalists if k not in timed}
    pruned = {**(pruned or {}), **{k: f"confirm: {why}" for k, why in errors.items()}}
    if not timed:
        return verdict(None, CONFIRM_FAILED, where=session.where,
                       why="no finalist could be timed in the confirm session: " + "; ".join(
                           f"{k}: {why}" for k, why in errors.items()))
    k = max(family, len(timed) + (1 if dispatch and len(mix) > 1 else 0))
    common = dict(confidence=rule.confidence(k), finalists=k, rounds=session.rounds, where=session.where)
    judgements = {key: judge(key, session.eager, session.candidates[key], mix, rule, k) for key in timed}
    figures = {key: objective.figures(session.candidates[key], mix) for key in timed}
    if objective.kind != SPEEDUP:
        figures["eager"] = objective.figures(session.eager, mix)
        common["figures"] = figures
    eligible = [key for key in timed if objective.eligible(figures[key])]

    def best(keys: list[str]) -> str:
        return max(keys, key=lambda key: objective.score(figures[key], judgements[key].median))

    if not rule.enabled:
        if not eligible:
            return verdict(None, OVER_BUDGET, judgements=judgements, why="no finalist meets the latency budget",
                           **common)
        return verdict(best(eligible), VALIDATION_OFF, judgements=judgements, **common)
    control = judge("control", session.eager, session.control, mix, rule, k)
    out = verdict(None, INCONCLUSIVE, judgements=judgements, control=control, **common)
    if not control_fits(control, rule):
        out.kind = HOST_UNFIT
        return out
    spread, where = eager_spread(session.eager, session.control)
    if spread > rule.spread_tolerance:
        out.kind = HOST_UNFIT
        at = "over the passes of the recorded calls" if where == MIX else f"at batch size {where}"
        out.why = (f"eager against itself spread {1 + spread:.2f}x (p90 over p10 of its paired rounds) {at} "
                   f"within the confirm session, more than the A/A guard's "
                   f"{1 + rule.spread_tolerance:.2f}x: the host's load moved under the session, so no figure of "
                   f"it holds; tune again on a quiet host (nothing else running, or fewer serving_threads than "
                   f"cores)")
        return out
    if not eligible:
        out.kind, out.why = OVER_BUDGET, "no finalist meets the latency budget"
        return out
    accepted = [key for key in eligible if judgements[key].accepted]
    if accepted:
        out.chosen, out.kind = best(accepted), FASTER
    if dispatch and len(mix) > 1 and objective.kind == SPEEDUP:
        _dispatch(out, session, timed, mix, rule, k)
    if out.chosen is None:
        out.kind = NOT_FASTER if all(judgements[key].kind != INCONCLUSIVE for key in eligible) else INCONCLUSIVE
    return out


def _dispatch(out: Verdict, session: Session, timed: list[str], mix: dict[int, int], rule: Rule, k: int) -> None:
    """Route each batch size to the candidate with the highest median there among those whose lower bound
    there reaches the gate (eager where none does); judge the composite's rounds (each size's route's own
    rounds of this session) by the rule; take it where accepted and better over the mix than the winner."""
    routes: dict[int, str | None] = {}
    for bs in mix:
        best, best_median = None, 0.0
        for key in timed:
            i = out.judgements[key].intervals[bs]
            if i["low"] >= rule.gate and i["median"] > best_median:
                best, best_median = key, i["median"]
        routes[bs] = best
    members = {key for key in routes.values() if key is not None}
    if not members or (len(members) == 1 and None not in routes.values() and out.chosen in members):
        return   # eager everywhere, or the single winner everywhere: nothing to compose
    composite = {bs: (session.candidates[key][bs] if key else session.eager[bs]) for bs, key in routes.items()}
    judgement = judge(DISPATCH, session.eager, composite, mix, rule, k)
    out.judgements[DISPATCH] = judgement
    winner = out.judgements[out.chosen].median if out.chosen else 0.0
    if judgement.accepted and judgement.median > winner:
        out.chosen, out.kind, out.routes = DISPATCH, FASTER, routes
