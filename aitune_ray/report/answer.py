"""The report's answer and verdicts, in one place: what to deploy per module and how much faster (per batch
size, with its interval), and each candidate's verdict, which the summary table, the details, the plot and
the CLI all show.

Everything here reads the decision record as it is (ModuleReport: chosen, verdicts, deploy_checks, ...).
A verdict word the decision adds later (a "host unfit" verdict, say) is shown as it is.
"""

from __future__ import annotations

import math

from aitune_ray.decision.screen import SCREEN_CONFIDENCE
from aitune_ray.decision.verdict import CONFIRM_FAILED, HOST_UNFIT, INCONCLUSIVE
from aitune_ray.records.results import OK, REJECTED, BuildResult
from aitune_ray.report.model import ModuleReport, _config_text

#: Kinds of verdict, which set how a candidate is drawn and coloured.
CHOSEN, PASSED, UNDECIDED, LOST, FAILED = "chosen", "passed", "undecided", "rejected", "failed"
#: Verdict words (from the decision record) that say the candidate lost; any other word that did not pass is
#: undecided.
_LOST_WORDS = ("slower", "not faster")


def label(result: BuildResult, width: int = 48) -> str:
    """A candidate's short name: its backend, with the settings that set it apart where they are short."""
    config = _config_text(result.spec or {})
    text = f"{result.backend} ({config})" if config else result.backend
    return text if len(text) <= width else text[:width - 4] + "...)"


def verdict(module: ModuleReport, result: BuildResult) -> tuple[str, str]:
    """(the candidate's verdict in a few words, its kind: CHOSEN, PASSED, UNDECIDED, LOST or FAILED)."""
    if result.key == module.chosen:
        return "chosen", CHOSEN
    if result.status != OK:
        return ("incorrect (outputs differ from eager)", LOST) if result.status == REJECTED else (result.status, FAILED)
    for check in module.deploy_checks:
        if check.get("key") == result.key and check.get("fell_back_to"):
            where = "as loaded from the checkpoint" if check.get("as_loaded") else "as deployed"
            return f"chosen, then lost to eager {where}", LOST
    record = module.verdicts.get(result.key) or {}
    word = " ".join(str(record.get("verdict") or "").split())
    if record.get("passed"):
        return (word if word and word != "faster" else "faster, not the fastest"), PASSED
    pruned = pruned_reason(module, result.key)
    if not word and pruned:
        return pruned, LOST if any(w in pruned for w in _LOST_WORDS) else UNDECIDED
    if not word:
        return "not judged", UNDECIDED
    if word == INCONCLUSIVE:
        sizes = failed_sizes(module, result.key)
        word += f" at bs {', '.join(map(str, sizes))}" if sizes else " over the recorded calls"
    return word, LOST if any(w in word for w in _LOST_WORDS) else UNDECIDED


def _rule(module: ModuleReport) -> tuple[float, float]:
    """(gate, floor) of the decision's rule: 1 + min_speedup_ratio, 1 - noise_tolerance (the defaults where the
    record has none)."""
    data = module.verdict or {}
    return 1.0 + float(data.get("min_speedup_ratio", 0.01)), 1.0 - float(data.get("noise_tolerance", 0.03))


def failed_sizes(module: ModuleReport, key: str) -> list[int]:
    """The batch sizes where an inconclusive candidate fell short: those whose lower bound is under the floor
    (not shown non-inferior there), else those whose lower bound is under the gate (not shown faster there)."""
    intervals = {int(bs): i for bs, i in ((module.verdicts.get(key) or {}).get("intervals") or {}).items()}
    gate, floor = _rule(module)
    below = sorted(bs for bs, i in intervals.items() if _number(i.get("low")) and i["low"] < floor)
    return below or sorted(bs for bs, i in intervals.items() if _number(i.get("low")) and i["low"] < gate)


def pruned_reason(module: ModuleReport, key: str) -> str:
    """Why candidate key did not reach the confirm session ("" when it did, or nothing says)."""
    why = ((module.verdict or {}).get("pruned") or {}).get(key) or ""
    if not why and key not in module.verdicts and key in ((module.verdict or {}).get("screened") or {}):
        why = module.notes.get(key, "")
    return " ".join(str(why).split())


def screening(module: ModuleReport, key: str):
    """(median, low, high) of candidate key's screening against eager over the recorded calls (at
    SCREEN_CONFIDENCE), None where it has none."""
    found = ((module.verdict or {}).get("screened") or {}).get(key) or {}
    return _triple(found.get("median"), found)


def screening_words(triple) -> str:
    """A screening figure, labelled as one: 0.62x [0.55, 0.70] at screening (90%)."""
    return f"{speedup_words(triple)} at screening ({percent(SCREEN_CONFIDENCE)})" if triple else "-"


def confidence(module: ModuleReport) -> float | None:
    """The two-sided confidence of every interval of the module's confirm session (1 - alpha/K); None where
    the record has none."""
    value = (module.verdict or {}).get("confidence")
    if not _number(value) or not value:
        value = next((v.get("confidence") for v in module.verdicts.values()
                      if _number(v.get("confidence")) and v.get("confidence")), None)
    return float(value) if value else None


def confidence_words(module: ModuleReport) -> str:
    """The label of the decision's intervals: "98.3% intervals" (K = 3 at alpha 0.05), or, where the record
    names no confidence, "intervals at the decision's confidence"."""
    value = confidence(module)
    return f"{percent(value)} intervals" if value else "intervals at the decision's confidence"


def percent(value: float) -> str:
    """95%, 98.3%: one decimal where it is not whole."""
    text = f"{value * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"


def mix_outside(found: dict) -> bool:
    """Whether the median over the recorded calls lies outside the per-size medians (it can: it is measured on
    passes over the recorded calls in their order, not averaged from the per-size medians)."""
    sizes = [t[0] for t in (found.get("bs") or {}).values() if t]
    mix = found.get("mix")
    return bool(mix and len(sizes) > 1 and not min(sizes) <= mix[0] <= max(sizes))


#: Why the figure over the recorded calls can lie outside the per-size figures.
WEIGHTING = ("the figure over the recorded calls is measured on passes over the recorded calls in the order "
             "recorded, sizes interleaved as a serving loop calls them; it is not an average of the per-size "
             "medians: switching between sizes costs eager and a compiled candidate differently, and "
             "round-to-round noise can put it outside them too")


def figures(module: ModuleReport, key: str | None) -> dict:
    """The decision's speedup of candidate key against eager, as the candidates table reads it (its rows):
    {"mix": (median, low, high), "bs": {bs: (median, low, high)}}, low and high None where no interval was
    recorded, None where no figure; {} for eager or an unknown key."""
    from aitune_ray.report.tables import batch_sizes, candidate_rows, interval

    if key is None:
        return {}
    for row, result in zip(candidate_rows(module), [None] + module.results):
        if result is not None and result.key == key:
            mix = _triple(row.get("speedup"), {"low": row.get("speedup_low"), "high": row.get("speedup_high")})
            sizes = {}
            for bs in batch_sizes(module):
                span = interval(row, bs)
                sizes[bs] = _triple(row.get(f"speedup_bs{bs}"), {"low": span[0], "high": span[1]} if span else {})
            return {"mix": mix, "bs": sizes} if mix or any(sizes.values()) else {}
    return {}


def _triple(median, span: dict):
    if not _number(median):
        return None
    low, high = span.get("low"), span.get("high")
    return (float(median), float(low), float(high)) if _number(low) and _number(high) else (float(median), None, None)


def speedup_words(triple) -> str:
    """1.54x [1.21, 1.90] (the interval where there is one); "-" for none."""
    if not triple:
        return "-"
    median, low, high = triple
    return f"{_n(median)}x" + (f" [{_n(low)}, {_n(high)}]" if low is not None else "")


def answer(module: ModuleReport, unfit: str = "") -> str:
    """One line: what to deploy for this module and how much faster than eager, per batch size, with intervals."""
    chosen = module.chosen_result()
    caveat = " Measured on a host unfit to measure on: see 'Host' below." if unfit else ""
    if chosen is None:
        return f"{module.module}: keep eager ({_why_eager(module)}).{caveat}"
    found = figures(module, chosen.key)
    if not found:
        return f"{module.module}: deploy {label(chosen)}; its speed was not compared with eager.{caveat}"
    sizes = ", ".join(f"bs {bs} {speedup_words(t)}" for bs, t in found["bs"].items() if t)
    why = f" ({WEIGHTING})" if mix_outside(found) else ""
    routes = ""
    if module.dispatch:
        names = {r.key: r.backend for r in module.results}
        routes = "; per batch size: " + ", ".join(f"bs {bs} -> {names.get(k, k) if k else 'eager'}"
                                                  for bs, k in sorted(module.dispatch.items()))
    where = f"; measured on {module.measured_in}" if getattr(module, "measured_in", "") else ""
    return (f"{module.module}: deploy {label(chosen)}: {speedup_words(found['mix'])} as fast as eager over the "
            f"recorded calls{why} ({sizes}; {confidence_words(module)}{where}){routes}.{caveat}")


def _why_eager(module: ModuleReport) -> str:
    """Why eager was kept, true to the record: what was measured and what it showed."""
    for check in reversed(module.deploy_checks):
        if check.get("fell_back_to") == "eager":
            where = "as loaded from the checkpoint" if check.get("as_loaded") else "as deployed"
            return f"{check.get('backend')} was chosen but lost to eager {where}"
    if not module.results:
        return "no candidate"
    kind = (module.verdict or {}).get("kind")
    if kind == HOST_UNFIT:
        return "the host was unfit to measure on: eager against itself did not read 1"
    if kind == CONFIRM_FAILED:
        return f"the confirm session failed: {(module.verdict or {}).get('why') or 'no reason recorded'}"
    judged = [r for r in module.results if r.status == OK and _number(module.speedups.get(r.key))]
    if judged:
        best = max(judged, key=lambda r: module.speedups[r.key])
        words, _ = verdict(module, best)
        return (f"no candidate was shown faster; the best, {label(best)}, read "
                f"{speedup_words(figures(module, best.key).get('mix'))}: {words}")
    screened = [(r, t) for r in module.results if r.status == OK and (t := screening(module, r.key))]
    if screened:
        best, triple = max(screened, key=lambda pair: pair[1][0])
        return (f"no candidate was shown faster; the best at its screening, {label(best)}, read "
                f"{screening_words(triple)}: {pruned_reason(module, best.key) or 'not confirmed'}")
    if not any(r.status == OK for r in module.results):
        return "no candidate built and ran correctly"
    return "no candidate was compared with eager"


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _n(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"
