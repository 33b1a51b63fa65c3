"""The report's answer and verdicts, in one place: what to deploy per module and how much faster (per batch
size, with its interval), and each candidate's verdict, which the summary table, the details, the plot and
the CLI all show.

Everything here reads the decision record as it is (ModuleReport: chosen, verdicts, deploy_checks, ...).
A verdict word the decision adds later (a "host unfit" verdict, say) is shown as it is.
"""

from __future__ import annotations

import math

from aitune_ray.records.results import OK, REJECTED, BuildResult
from aitune_ray.tune_strategy.report import ModuleReport, _config_text

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
    if not word:
        return "not judged", UNDECIDED
    return word, LOST if any(w in word for w in _LOST_WORDS) else UNDECIDED


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
    routes = ""
    if module.dispatch:
        names = {r.key: r.backend for r in module.results}
        routes = "; per batch size: " + ", ".join(f"bs {bs} -> {names.get(k, k) if k else 'eager'}"
                                                  for bs, k in sorted(module.dispatch.items()))
    where = f"; measured on {module.measured_in}" if getattr(module, "measured_in", "") else ""
    return (f"{module.module}: deploy {label(chosen)}: {speedup_words(found['mix'])} as fast as eager over the "
            f"recorded calls ({sizes}; 95% intervals{where}){routes}.{caveat}")


def _why_eager(module: ModuleReport) -> str:
    for check in reversed(module.deploy_checks):
        if check.get("fell_back_to") == "eager":
            where = "as loaded from the checkpoint" if check.get("as_loaded") else "as deployed"
            return f"{check.get('backend')} was chosen but lost to eager {where}"
    judged = [r for r in module.results if r.status == OK and _number(module.speedups.get(r.key))]
    if not module.results:
        return "no candidate"
    if not judged:
        return "no candidate built, ran correctly and was measured"
    best = max(judged, key=lambda r: module.speedups[r.key])
    words, _ = verdict(module, best)
    return (f"no candidate was shown faster; the best, {label(best)}, read "
            f"{speedup_words(figures(module, best.key).get('mix'))}: {words}")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _n(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"
