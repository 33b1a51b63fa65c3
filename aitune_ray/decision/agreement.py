"""Whether a later timing of the deployed choice (post-deploy, as loaded) agrees with the decision.

A check after deployment is another moment, and maybe another context: it never decides, and its figure is
never shown as the answer. It is judged against the decision's own interval over the recorded call mix: the
two agree when their intervals overlap, or lie apart by less than the rule's noise tolerance (a difference
is one when it is both significant and at least that large: two narrow intervals of a quiet GPU host can
miss each other by a percent). When they do not, the difference is a measurement problem, and it is
named as one: a context mismatch (the check ran with another torch thread count, on another device type, or
in another kind of process than the decision: a Ray actor's timings against the serving process's), else an
unfit host (the same context, yet the figures moved: the host's load changed
between the two moments). Plain data in, plain data out.
"""

from __future__ import annotations

from aitune_ray.measure.request import PROCESS_WORDS

AGREES, CONTEXT_MISMATCH, HOST_UNFIT = "agrees", "context mismatch", "host unfit"


def agreement(decided: dict | None, checked: dict, decided_in: str, checked_in: str,
              tolerance: float = 0.0) -> dict:
    """{"verdict": AGREES / CONTEXT_MISMATCH / HOST_UNFIT / "no decision figure", "text": one line that says
    what to make of the check}. decided / checked: intervals over the mix ({"median", "low", "high"});
    decided_in / checked_in: the contexts they were measured in, as ServingContext.describe() gives them;
    tolerance: the rule's noise tolerance (Rule.noise_tolerance)."""
    seen = f"{_span(checked)} in {checked_in}" if checked_in else _span(checked)
    if not decided or decided.get("low") is None:
        return {"verdict": "no decision figure",
                "text": f"read {seen} (information only: the decision has no interval to judge it against)"}
    said = f"{_span(decided)}" + (f" in {decided_in}" if decided_in else "")
    if within(decided, checked, tolerance):
        return {"verdict": AGREES, "text": f"agrees with the decision ({said}): read {seen}"}
    if decided_in and checked_in and decided_in != checked_in:
        if _threads(decided_in) == _threads(checked_in):   # the same device and threads: another process
            advice = ("the decision was timed in another process than the one that serves, which sees the host's "
                      "load differently; the check's figure is the serving process's, and the inline executor "
                      "times the decision there")
        else:
            advice = "serve in that context, or tune with serving_threads set to the one you serve in"
        return {"verdict": CONTEXT_MISMATCH,
                "text": f"context mismatch: read {seen}, but the decision's figure {_span(decided)} holds in "
                        f"{decided_in}; {advice}"}
    return {"verdict": HOST_UNFIT,
            "text": f"host unfit: read {seen}, outside the decision's {said} in the same context; the host's "
                    f"load moved the timings between the two, so neither figure holds for a quiet host: tune "
                    f"and check again with nothing else running"}


def within(a: dict, b: dict, tolerance: float) -> bool:
    """Whether intervals a and b ({"low", "high"}) overlap, or lie apart by less than tolerance (relative)."""
    return b["low"] <= a["high"] * (1 + tolerance) and a["low"] <= b["high"] * (1 + tolerance)


def _threads(context: str) -> str:
    """A described context without its process ('cpu with 2 torch threads in a Ray actor' -> 'cpu with 2
    torch threads')."""
    for words in PROCESS_WORDS.values():
        context = context.replace(f" {words}", "")
    return context


def _span(i: dict) -> str:
    return f"{_n(i['median'])}x [{_n(i['low'])}, {_n(i['high'])}]"


def _n(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
