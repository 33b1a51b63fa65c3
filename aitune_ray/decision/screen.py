"""Screening: right after a build, on the worker that built it, a few shuffled rounds of the candidate paired
with eager on that same device. Its ratio ranks candidates built on different devices at different moments
(what drifts between them cancels in the pairing), and prunes:
- a candidate whose screening interval lies wholly below 1 (it is slower than eager there);
- every candidate beyond the max_finalists best by their screening median.
Screening decides nothing else: only the confirm session's numbers accept a candidate. Builds outside the
finalists are released at once, so that what is held does not grow with the number of candidates.

max_finalists is a hard cap. Candidates tied with the K-th within the screening noise are not added: each
one added would widen every interval of the confirm session (the Bonferroni divisor grows with it) and hold
one more build, while the one it displaces is, by the screening, no faster than it.
"""

from __future__ import annotations

from aitune_ray.measure.request import DEFAULT_ROUNDS
from aitune_ray.measure.statistics import Interval, paired_interval

SCREEN_ROUNDS = DEFAULT_ROUNDS["screen"]   # paired rounds per recorded batch size, right after each build
SCREEN_CONFIDENCE = 0.90    # of the screening interval (8 rounds: the 2nd smallest and 2nd largest ratio)
MAX_FINALISTS = 3
SLOWER_AT_SCREENING = "slower than eager at its screening"


def screen_interval(screen: dict | None, mix: dict[int, int]) -> Interval | None:
    """The screening interval of the paired speedup over the mix, from a BuildResult.screen
    ({"eager": {bs: [ms]}, "candidate": {bs: [ms]}}); None without one."""
    if not screen or not screen.get("eager"):
        return None
    eager = {int(bs): v for bs, v in screen["eager"].items()}
    cand = {int(bs): v for bs, v in screen["candidate"].items()}
    sizes = {bs: n for bs, n in mix.items() if bs in eager and bs in cand and n > 0}
    if not sizes:
        return None
    return paired_interval(eager, cand, sizes, SCREEN_CONFIDENCE)


def shortlist(screens: dict[str, dict | None], mix: dict[int, int], max_finalists: int = MAX_FINALISTS,
              order: list[str] | None = None, prune_slower: bool = True) -> tuple[list[str], dict[str, str], dict[str, dict]]:
    """(finalists, pruned, screened) of the screened candidates (key -> BuildResult.screen, in the strategy's
    order): finalists best first by screening median, at most max_finalists; pruned: key -> why not a
    finalist; screened: key -> screening interval (plain dict). A candidate without screening numbers ranks
    after every screened one, in the given order. prune_slower: False keeps candidates wholly below 1 too
    (performance validation off)."""
    order = order or list(screens)
    screened: dict[str, dict] = {}
    pruned: dict[str, str] = {}
    ranked: list[tuple[float, int, str]] = []
    for position, key in enumerate(order):
        interval = screen_interval(screens.get(key), mix)
        if interval is None:
            ranked.append((float("-inf"), -position, key))
            continue
        screened[key] = interval.to_dict()
        if prune_slower and interval.high < 1.0:
            pruned[key] = f"{SLOWER_AT_SCREENING} ({interval.text()} over {interval.rounds} paired rounds)"
            continue
        ranked.append((interval.median, -position, key))
    ranked.sort(reverse=True)
    keys = [key for _, _, key in ranked]
    finalists = keys[:max(1, max_finalists)]
    for key in keys[len(finalists):]:
        pruned[key] = f"screening: not among the {len(finalists)} best"
    return finalists, pruned, screened
