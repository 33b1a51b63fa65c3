"""OneBackendStrategy: one backend, confirmed and accepted, or eager; its failure is an error."""

from __future__ import annotations

from aitune_ray.backend.backend import Backend
from aitune_ray.errors import BuildError, CorrectnessError
from aitune_ray.records.results import REJECTED
from aitune_ray.report.verdict import diagnostic_failed_text, unmeasured_text
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy
from aitune_ray.tune_strategy.validation_mode import PerformanceValidationMode


class OneBackendStrategy(TuneStrategy):
    """Build one backend. Raises the backend's error when it fails to build or is wrong; keeps eager (with
    the verdict's reason) when it is correct but not accepted as faster."""

    def __init__(self, backend: Backend, **kwargs):
        super().__init__([backend], **kwargs)

    def _decide(self, context, executor, handle, report) -> None:
        result = next(iter(handle))
        report.results.append(result)
        if result.status == REJECTED:
            report.decision = f"{result.backend} rejected: {result.error}"
            raise CorrectnessError(f"{context.name}: {result.backend} is not correct: {result.error}")
        if not result.ok:
            report.decision = f"{result.backend} failed ({result.status}): {result.error}"
            if result.exception is not None:   # the backend's own error, from either executor
                raise result.exception
            raise BuildError(f"{context.name}: {result.backend} {result.status}: {result.error}")
        if self.performance_validation_mode is PerformanceValidationMode.DISABLED:
            report.chosen, report.notes[result.key] = result.key, unmeasured_text()
            report.decision = f"chose {result.backend}: {unmeasured_text()}"
            return
        verdict = self._verdict(context, executor, report, [result], max_finalists=1)
        if verdict.chosen is None and not self.performance_validation:
            # DIAGNOSTIC: the comparison does not decide, so a failed confirm session does not either
            report.chosen, report.notes[result.key] = result.key, diagnostic_failed_text(verdict)
            report.decision = f"chose {result.backend}: {report.notes[result.key]}"
