"""The kernel choice: which candidate of a function is kept, by the one decision procedure (aitune_ray.decision).

Pure: no timing, no device, no Ray. The timings come through the runner that made the records (in this process
or on Ray actors), so every executor chooses the same way:

1. screening: each valid candidate's speedup against the original function timed on its own GPU
   (``originals``: (node, gpu) -> the original's record) ranks the candidates; the max_finalists best go on;
2. confirm: the original, an A/A control (the original again, as a callable of its own) and the finalists
   timed in paired shuffled rounds at every recorded sample (shape) of the function, on one device
   (``confirm(finalists)``, the runner's "interleaved" task);
3. accept: the decision's rule with the original as the baseline and the function's recorded call mix as the
   mix: superiority over the mix, non-inferiority at every recorded shape, at confidence 1 - alpha/K. The
   accepted finalist with the highest median is kept; else the original stays.
"""

from __future__ import annotations

import logging
from typing import Callable

from aitune_ray.decision import Rule, Session, decide
from aitune_ray.decision.screen import MAX_FINALISTS
from aitune_ray.kernel_forge.records import ORIGINAL, ProviderBenchmark

logger = logging.getLogger(__name__)


def set_speedups(valid: list[ProviderBenchmark], originals: dict[tuple, ProviderBenchmark]) -> None:
    """Each record's screening speedup against the original of its own (node, gpu) (another GPU's where its
    own has none: a ranking only, never a decision)."""
    for record in valid:
        base = originals.get((record.node, record.gpu)) or next(iter(originals.values()))
        record.speedup = base.median_ms / max(record.median_ms, 1e-9)


def forge_session(out: dict | None) -> tuple[Session, dict[int, int]]:
    """(the Session, the call mix by shape index) of a runner's "interleaved" output; a failed session for None."""
    if not out:
        return Session.failure("the confirm session of the original and its finalists did not run"), {}
    if out.get("failed"):
        return Session.failure(out["failed"], out.get("gpu", "")), {}

    def rounds(per: dict) -> dict[int, list[float]]:
        return {int(shape): list(t["rounds_ms"]) for shape, t in per.items()}

    session = Session(rounds(out["original"]), rounds(out["control"]),
                      {key: rounds(per) for key, per in out["candidates"].items()}, dict(out.get("errors") or {}),
                      " ".join(str(out.get(k) or "") for k in ("node", "gpu")).strip())
    return session, {int(shape): int(n) for shape, n in out["mix"].items()}


def choose(function: str, records: list[ProviderBenchmark], originals: dict[tuple, ProviderBenchmark],
           confirm: Callable[[list[ProviderBenchmark]], dict | None] | None, rule: Rule | None = None,
           max_finalists: int = MAX_FINALISTS) -> ProviderBenchmark | None:
    """The record of the candidate to keep for function, or None (the original stays). confirm(finalists):
    the runner's paired rounds of the original, the A/A control and the finalists (None: no session can run,
    and nothing is kept). rule: the strategy's accept rule (None: the defaults); the kernel forge always
    judges (a replacement no faster than the original is never worth planning), whatever rule.enabled says."""
    valid = [r for r in records if r.ok and r.median_ms is not None and r.source != ORIGINAL]
    if not valid:
        return None
    if not originals:
        logger.warning("the original %s could not be timed on any worker", function)
        return None
    set_speedups(valid, originals)
    finalists = sorted(valid, key=lambda r: r.speedup, reverse=True)[:max(1, max_finalists)]
    if confirm is None:
        logger.info("no confirm session for %s (final_rounds is 0): the original is kept", function)
        return None
    out = confirm(finalists)
    session, mix = forge_session(out)
    rule = Rule.from_settings(rule.settings()) if rule is not None else Rule()
    verdict = decide(session, [str(i) for i in range(len(finalists))], mix, rule)
    for index, record in enumerate(finalists):
        judged = verdict.judgements.get(str(index))
        record.remeasured = {"verdict": judged.kind if judged else verdict.kind, "gpu": (out or {}).get("gpu", ""),
                             "node": (out or {}).get("node", ""),
                             "rounds": verdict.rounds, "confidence": verdict.confidence,
                             "finalists": verdict.finalists, "raw_speedup": record.speedup,
                             **({"speedup": judged.median, "interval": judged.interval,
                                 "intervals": judged.intervals} if judged else {"why": verdict.why})}
        if judged:
            record.speedup = judged.median
    if verdict.chosen is None:
        control = verdict.control.intervals if verdict.control else {}
        logger.info("nothing is kept for %s: %s%s; the A/A control by shape: %s", function, verdict.kind,
                    f" ({verdict.why})" if verdict.why else "",
                    ", ".join(f"{shape}: {i['median']:.3f}x [{i['low']:.3f}, {i['high']:.3f}]" for shape, i in control.items()))
        return None
    best = finalists[int(verdict.chosen)]
    best.selected = True
    return best
