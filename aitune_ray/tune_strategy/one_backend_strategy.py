"""OneBackendStrategy: one backend; its failure is an error, its slowness means eager."""

from __future__ import annotations

from aitune_ray.backend.backend import Backend
from aitune_ray.errors import BuildError, CorrectnessError
from aitune_ray.results import REJECTED
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy


class OneBackendStrategy(TuneStrategy):
    """Build one backend. Raises the backend's error when it fails to build or is wrong; falls back to
    eager (with a logged reason) when it is correct but not faster."""

    def __init__(self, backend: Backend, **kwargs):
        super().__init__([backend], **kwargs)

    def _decide(self, context, executor, handle, baseline, report) -> None:
        result = next(iter(handle))
        report.results.append(result)
        if result.status == REJECTED:
            report.decision = f"{result.backend} rejected: {result.error}"
            raise CorrectnessError(f"{context.name}: {result.backend} is not correct: {result.error}")
        if not result.ok:
            report.decision = f"{result.backend} failed ({result.status}): {result.error}"
            original = getattr(result, "exception", None)
            if original is not None:
                raise original
            raise BuildError(f"{context.name}: {result.backend} {result.status}: {result.error}")
        outcome = self._judge(context, executor, [result], baseline, report)[result.key]
        if outcome.passed:
            report.chosen = result.key
            report.decision = f"chose {result.backend}: {outcome.reason}"
        else:
            report.decision = f"kept eager: {result.backend} is correct but not faster ({outcome.reason})"
