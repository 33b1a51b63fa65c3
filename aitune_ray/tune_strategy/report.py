"""Tuning reports: one row per candidate (and the eager baseline), as a DataFrame or markdown."""

from __future__ import annotations

import dataclasses
import math

from aitune_ray.measure.timing import Timing
from aitune_ray.results import BuildResult


@dataclasses.dataclass
class ModuleReport:
    """How one module was tuned: the baseline, every candidate's result and the decision."""

    module: str
    strategy: str
    device: str
    call_mix: dict[int, int]
    baseline: dict[int, dict]                       # batch size -> Timing.to_dict()
    results: list[BuildResult] = dataclasses.field(default_factory=list)
    chosen: str | None = None                      # key of the chosen result, None: eager
    decision: str = ""
    notes: dict[str, str] = dataclasses.field(default_factory=dict)           # key -> gate verdict
    speedups: dict[str, float] = dataclasses.field(default_factory=dict)      # key -> mix speedup
    remeasured_baseline: dict[int, dict] = dataclasses.field(default_factory=dict)

    def chosen_result(self) -> BuildResult | None:
        return next((r for r in self.results if r.key == self.chosen), None)

    def rows(self) -> list[dict]:
        rows = [self._row("TorchEager (baseline)", "ok", baseline=True)]
        for r in self.results:
            rows.append(self._row(r.backend, r.status, r))
        return rows

    def _row(self, backend: str, status: str, r: BuildResult | None = None, baseline: bool = False) -> dict:
        corr = (r.correctness or {}) if r else {}
        row = {
            "module": self.module,
            "backend": backend,
            "config": _config_text(r.spec.get("config", {})) if r else "",
            "status": status,
            "chosen": (r is not None and r.key == self.chosen) or (baseline and self.chosen is None),
            "speedup": 1.0 if baseline else self.speedups.get(r.key, math.nan),
            "correctness_error": corr.get("max_error", math.nan) if r else 0.0,
            "tolerance": corr.get("tolerance", math.nan) if r else math.nan,
            "build_s": r.build_s if r else 0.0,
            "gpu": r.gpu if r else self.device,
            "error": r.error if r else "",
            "note": self.notes.get(r.key, "") if r else "",
        }
        for bs in self.call_mix:
            timing = _timing(self.baseline, self.remeasured_baseline, bs) if baseline else (
                r.timing(bs) if r else None)
            row[f"throughput_bs{bs}"] = timing.throughput if timing else math.nan
            row[f"latency_ms_bs{bs}"] = timing.median_ms if timing else math.nan
            row[f"p90_ms_bs{bs}"] = timing.p90_ms if timing else math.nan
            raw = (self.baseline if baseline else (r.timings if r else {})).get(bs)
            row[f"raw_latency_ms_bs{bs}"] = raw["median_ms"] if raw else math.nan
        return row

    def dataframe(self):
        import pandas as pd

        return pd.DataFrame(self.rows())

    def markdown(self) -> str:
        head = (f"### {self.module} ({self.strategy} on {self.device}; recorded batch sizes "
                f"{_mix_text(self.call_mix)})\n\n")
        cols = ["backend", "config", "status", "correctness", "speedup"]
        cols += [f"bs{bs} thr/s, p50/p90 ms" for bs in self.call_mix] + ["build s", "note"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in self.rows():
            cells = [row["backend"] + (" **(chosen)**" if row["chosen"] else ""), row["config"], row["status"],
                     _num(row["correctness_error"]), _num(row["speedup"], "x")]
            for bs in self.call_mix:
                cells.append(f"{_num(row[f'throughput_bs{bs}'])}, {_num(row[f'latency_ms_bs{bs}'])}/"
                             f"{_num(row[f'p90_ms_bs{bs}'])}")
            cells += [_num(row["build_s"]), (row["note"] or row["error"]).replace("|", "/").replace("\n", " ")[:160]]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        return head + "\n".join(lines) + self._remeasured_text() + f"\n\nDecision: {self.decision}\n"

    def _remeasured_text(self) -> str:
        """Finalists re-timed beside eager on one device: the re-measured p50 ms, the raw one in brackets."""
        if not self.remeasured_baseline:
            return ""
        parts = []
        for row, r in zip(self.rows(), [None] + self.results):
            if r is None or r.remeasured:
                cells = [f"bs{bs} {_num(row[f'latency_ms_bs{bs}'])} ({_num(row[f'raw_latency_ms_bs{bs}'])})"
                         for bs in self.call_mix]
                parts.append(f"{row['backend']}: " + ", ".join(cells))
        return "\n\nRe-measured side by side with eager on one device, p50 ms (raw): " + "; ".join(parts)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["results"] = [r.to_dict() for r in self.results]
        for r in data["results"]:
            r["artifacts"] = {k: (v if isinstance(v, str) else f"<{len(v)} bytes>") for k, v in r["artifacts"].items()}
        return data


def _timing(base: dict, remeasured: dict, bs: int) -> Timing | None:
    data = remeasured.get(bs) or base.get(bs)
    return Timing.from_dict(data) if data else None


def _config_text(config: dict) -> str:
    return ",".join(f"{k}={_value_text(v)}" for k, v in config.items() if v not in (None, False, {}, []))


def _value_text(value) -> str:
    """Serialized objects (kernel providers, generators) by their type and chief setting, not their JSON."""
    if isinstance(value, dict) and "type" in value:
        detail = value.get("backend") or value.get("name") or value.get("mode")
        return f"{value['type']}({detail})" if detail else str(value["type"])
    if isinstance(value, list) and any(isinstance(v, dict) and "type" in v for v in value):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return str(value)


def _mix_text(mix: dict[int, int]) -> str:
    return ", ".join(f"{bs} (x{n})" for bs, n in mix.items())


def _num(value: float, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if abs(value) >= 100:
        return f"{value:,.0f}{suffix}"
    return f"{value:.3g}{suffix}"


@dataclasses.dataclass
class TuningReport:
    """The reports of every module one tune() call reached."""

    modules: list[ModuleReport] = dataclasses.field(default_factory=list)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)     # module -> why it stayed eager

    def dataframe(self):
        import pandas as pd

        frames = [m.dataframe() for m in self.modules]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def markdown(self) -> str:
        parts = [m.markdown() for m in self.modules]
        parts += [f"### {name}\n\nStayed eager: {why}\n" for name, why in self.failures.items()]
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {"modules": [m.to_dict() for m in self.modules], "failures": dict(self.failures)}
