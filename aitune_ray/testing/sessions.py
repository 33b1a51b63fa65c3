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


def simulate_kernel_tunings(tunings: int, candidates: list[SimCandidate], shapes: dict[int, int], noise: float, *,
                            rule=None, rounds: int | None = None, seed: int = 0, drift: float = 0.0) -> list:
    """The provider kept (its key, or None for the original) in each of that many kernel searches of one
    function whose providers are candidates: the kernel forge's real choice (KernelOptimizer's, through
    kernel_forge.selection and decision.decide), on simulated screening and confirm numbers. shapes: the
    function's recorded samples (a shape index, read as eager's milliseconds per call, -> its calls). rule:
    the strategy's accept rule (None: the defaults); rounds: the confirm session's rounds (None: the kernel
    forge's own default, KernelOptimizer's final_rounds)."""
    from aitune_ray.kernel_forge.optimizer import FunctionSearch, KernelOptimizer

    runner = SimulatedForgeRunner(random.Random(seed), {c.key: c for c in candidates}, shapes, noise, drift)
    options = {} if rounds is None else {"final_rounds": rounds}
    optimizer = KernelOptimizer(runner=runner, rule=rule, **options)
    kept = []
    for _ in range(tunings):
        search = FunctionSearch("f", [], [], [runner.screened(c) for c in candidates])
        kept.append(optimizer._choose(search))
    return kept


class SimulatedForgeRunner:
    """The kernel forge's runner seam (kernel_forge.runner.ForgeRunner's originals and interleaved) on simulated
    numbers: the original takes `shape` ms per call at each recorded shape; a candidate's screening figure is one
    simulated pass over the mix; its confirm session has the optimizer's final_rounds paired rounds per shape."""

    def __init__(self, rng: random.Random, truth: dict[str, SimCandidate], shapes: dict[int, int], noise: float,
                 drift: float = 0.0):
        self.rng, self.truth, self.shapes, self.noise, self.drift = rng, truth, shapes, noise, drift

    def _pass(self, speedup_at) -> float:
        return sum(n * _ms(self.rng, shape / speedup_at(shape), self.noise, 1.0) for shape, n in self.shapes.items())

    def screened(self, candidate: SimCandidate):
        from aitune_ray.kernel_forge.records import OK, ProviderBenchmark

        return ProviderBenchmark("f", candidate.key, OK, median_ms=self._pass(candidate.at), gpu="sim",
                                 live=candidate.key)

    def originals(self, opt, search, where: set) -> dict:
        from aitune_ray.kernel_forge.records import OK, ORIGINAL, ProviderBenchmark

        record = ProviderBenchmark("f", ORIGINAL, OK, source=ORIGINAL, median_ms=self._pass(lambda _: 1.0), gpu="sim")
        return {(record.node, record.gpu): record}

    def interleaved(self, opt, search, finalists: list) -> dict:
        keys = [str(i) for i in range(len(finalists))]
        truth = {str(i): self.truth[r.description] for i, r in enumerate(finalists)}
        session = simulated_session(self.rng, truth, keys, self.shapes, self.noise, opt.final_rounds, self.drift)

        def timings(per: dict) -> dict:
            return {shape: {"rounds_ms": ms} for shape, ms in per.items()}

        return {"original": timings(session.eager), "control": timings(session.control),
                "candidates": {k: timings(v) for k, v in session.candidates.items()}, "mix": dict(self.shapes),
                "errors": {}, "rounds": opt.final_rounds, "gpu": "sim", "node": ""}
