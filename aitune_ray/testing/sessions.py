"""Simulated numbers for the decision procedure: what screening and a confirm session would read for
candidates of known true speedup under known noise, without timing anything.

Each timing is its true milliseconds times (1 + N(0, noise)), drawn independently for every callable in
every round; drift (a factor shared by every callable of a round, as a host's state moves) is cancelled by
the pairing. Eager takes 1 ms per sample of the batch at every batch size.
"""

from __future__ import annotations

import dataclasses
import random

from aitune_ray.decision.screen import SCREEN_ROUNDS
from aitune_ray.decision.session import Session


@dataclasses.dataclass
class SimCandidate:
    """A candidate's true speedup over eager: one figure, or one per batch size (others: the default)."""

    key: str
    speedup: float = 1.0
    by_bs: dict = dataclasses.field(default_factory=dict)

    def at(self, bs: int) -> float:
        return float(self.by_bs.get(bs, self.speedup))


def _ms(rng: random.Random, true_ms: float, noise: float, drift: float) -> float:
    return true_ms * drift * max(0.05, 1.0 + rng.gauss(0.0, noise))


def _drifts(rng: random.Random, rounds: int, drift: float) -> list[float]:
    return [max(0.2, 1.0 + rng.gauss(0.0, drift)) for _ in range(rounds)]


def simulated_screen(rng: random.Random, candidate: SimCandidate, mix: dict[int, int], noise: float,
                     rounds: int = SCREEN_ROUNDS, drift: float = 0.0, path_speedup: float = 1.0) -> dict:
    """A BuildResult.screen for candidate: rounds paired with eager on its own device (path_speedup: as in
    simulated_session)."""
    eager, cand = {}, {}
    for bs in mix:
        shared = _drifts(rng, rounds, drift)
        eager[bs] = [_ms(rng, float(bs), noise, d) for d in shared]
        cand[bs] = [_ms(rng, bs / candidate.at(bs) / path_speedup, noise, d) for d in shared]
    return {"eager": eager, "candidate": cand, "rounds": rounds}


def simulated_session(rng: random.Random, candidates: dict[str, SimCandidate], finalists: list[str],
                      mix: dict[int, int], noise: float, rounds: int, drift: float = 0.0,
                      path_speedup: float = 1.0) -> Session:
    """A confirm session of eager, the A/A control and the finalists. path_speedup: the control (eager
    called through the candidates' path) and every candidate run this much faster than eager's own call,
    as on a host where the calling thread changes a call's speed."""
    session = Session(where="simulated")
    for bs in mix:
        shared = _drifts(rng, rounds, drift)
        session.eager[bs] = [_ms(rng, float(bs), noise, d) for d in shared]
        session.control[bs] = [_ms(rng, bs / path_speedup, noise, d) for d in shared]
        for key in finalists:
            true = bs / candidates[key].at(bs) / path_speedup
            session.candidates.setdefault(key, {})[bs] = [_ms(rng, true, noise, d) for d in shared]
    return session


def simulate_tunings(tunings: int, candidates: list[SimCandidate], mix: dict[int, int], noise: float, *,
                     rule=None, rounds: int | None = None, max_finalists: int | None = None,
                     dispatch: bool = False, seed: int = 0, path_speedup: float = 1.0, drift: float = 0.0) -> list:
    """Verdicts of that many tunings of candidates: the real procedure (decision.choose) on simulated
    screening and confirm numbers. rounds / max_finalists: None for the defaults."""
    from aitune_ray.decision.procedure import choose
    from aitune_ray.decision.rule import Rule
    from aitune_ray.decision.screen import MAX_FINALISTS
    from aitune_ray.decision.session import CONFIRM_ROUNDS

    rule = rule or Rule()
    rounds = CONFIRM_ROUNDS if rounds is None else rounds
    rng = random.Random(seed)
    by_key = {c.key: c for c in candidates}
    verdicts = []
    for _ in range(tunings):
        screens = {c.key: simulated_screen(rng, c, mix, noise, drift=drift, path_speedup=path_speedup)
                   for c in candidates}
        verdicts.append(choose(
            screens, lambda finalists: simulated_session(rng, by_key, finalists, mix, noise, rounds, drift, path_speedup),
            mix, rule, max_finalists=MAX_FINALISTS if max_finalists is None else max_finalists, dispatch=dispatch))
    return verdicts
