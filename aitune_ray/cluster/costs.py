"""What a build is expected to cost, for the job's schedule: the backend's build_cost hint, refined by the
build times this job has measured so far (plain Python, no Ray).

Before anything is measured every estimate is a hint (relative units). Once builds end, estimates are in
seconds: a build costs its hint times this module's seconds per hint unit (a larger module builds slower);
in a module with nothing measured yet, its hint times its backend class's seconds per hint unit in this job
(a backend whose hint follows its configuration, such as an optimization level, keeps the spread of its
hints); else its hint times the job's seconds per hint unit.
"""

from __future__ import annotations

import collections
import threading

from aitune_ray.backend.backend import Backend


def hint_of(spec: dict) -> float:
    """The backend's own build_cost hint (1.0 when its spec cannot be made into a backend here)."""
    try:
        hint = float(Backend.from_spec(spec).cost_hint())
    except Exception:  # noqa: BLE001 - an unknown class: its build reports why; here it is an average build
        return 1.0
    return hint if hint > 0 else 1.0


class Costs:
    def __init__(self):
        self._lock = threading.Lock()
        self._by_class: dict[str, list[float]] = collections.defaultdict(list)    # backend type -> s per hint unit
        self._ratio_by_module: dict[str, list[float]] = collections.defaultdict(list)   # seconds per hint unit
        self._ratios: list[float] = []

    def measured(self, module: str, spec: dict, seconds: float) -> None:
        """A build of spec for module took seconds (a build that ended, whatever its status)."""
        if seconds <= 0:
            return
        ratio = seconds / hint_of(spec)
        with self._lock:
            self._by_class[spec.get("type", "")].append(ratio)
            self._ratio_by_module[module].append(ratio)
            self._ratios.append(ratio)

    def estimate(self, module: str, spec: dict) -> float:
        hint = hint_of(spec)
        with self._lock:
            if not self._ratios:
                return hint
            mine = self._ratio_by_module.get(module)
            same = self._by_class.get(spec.get("type", ""))
            if mine:
                return hint * _mean(mine)
            if same:
                return hint * _mean(same)
            return hint * _mean(self._ratios)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
