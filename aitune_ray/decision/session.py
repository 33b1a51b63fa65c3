"""The confirm session's numbers: eager, the A/A control and each finalist, timed in paired shuffled rounds
at every recorded batch size on one device, from one thread, at one moment. Plain data.

failed: why the session did not run ("" when it did); errors: finalist key -> why it could not be restored
or called (it is then left out of the decision, the others stand)."""

from __future__ import annotations

import dataclasses

from aitune_ray.measure.request import DEFAULT_ROUNDS
from aitune_ray.measure.timing import Timing

EAGER, CONTROL = "eager", "control"

#: Paired rounds per recorded batch size of a confirm session (aitune_ray.measure.request.DEFAULT_ROUNDS says
#: how it was chosen).
CONFIRM_ROUNDS = DEFAULT_ROUNDS["confirm"]


@dataclasses.dataclass
class Session:
    eager: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    control: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    candidates: dict[str, dict[int, list[float]]] = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    where: str = ""
    failed: str = ""
    context: dict = dataclasses.field(default_factory=dict)   # the ServingContext it ran in, as a dict
    device: str = ""

    @property
    def rounds(self) -> int:
        return min((len(v) for v in self.eager.values()), default=0)

    @classmethod
    def failure(cls, why: str, where: str = "") -> "Session":
        return cls(failed=why or "the confirm session failed", where=where)

    @classmethod
    def from_timings(cls, out: dict) -> "Session":
        """From a worker's confirm() output: {"eager", "control", "results": key -> timings, "errors",
        "node", "gpu", "failed"}; timings are batch size -> Timing.to_dict() with rounds_ms paired by index."""
        def rounds(timings: dict) -> dict[int, list[float]]:
            return {int(bs): list(Timing.from_dict(t).rounds_ms) if isinstance(t, dict) else list(t.rounds_ms)
                    for bs, t in timings.items()}

        where = " ".join(str(out.get(k) or "") for k in ("node", "gpu")).strip()
        if out.get("failed"):
            return cls.failure(out["failed"], where)
        return cls(rounds(out["eager"]), rounds(out["control"]),
                   {key: rounds(t) for key, t in out.get("results", {}).items()}, dict(out.get("errors") or {}),
                   where, context=dict(out.get("context") or {}), device=str(out.get("device") or ""))
