"""The report model: how each module was tuned (ModuleReport) and the whole tuning (TuningReport), as rows, a
DataFrame or markdown. The strategies fill it; the renderers of this package read it."""

from __future__ import annotations

import dataclasses
import math

from aitune_ray.backend.backend import config_defaults
from aitune_ray.measure.timing import Timing
from aitune_ray.records.results import BuildResult
from aitune_ray.runtime.printable import markdown_text

# Eager's ms/call moving by this factor between its first timing and the re-measure, within one tuning, is
# said in the report: on a GPU, clocks move a GPU-bound call by a few percent; a call that moves this much is
# bound by the host, whose speed changes with the CPU the process runs on (2x apart on an H200 machine's
# CPUs, benchmarks/host_modes.py).
EAGER_MOVED = 1.2
# The chosen backend's speedup at one batch size moving by this factor between the confirm session and the
# post-deploy timing (the wrapped Module, timed later, information only) is said in the report: a candidate and
# eager answer the host's state differently (a GPU-bound call and a host-bound one), so the speedup moves with it.
SPEEDUP_MOVED = 1.1


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
    notes: dict[str, str] = dataclasses.field(default_factory=dict)           # key -> its judgement in words
    speedups: dict[str, float] = dataclasses.field(default_factory=dict)      # key -> median speedup over the mix
    remeasured_baseline: dict[int, dict] = dataclasses.field(default_factory=dict)   # eager in the confirm session
    verdicts: dict[str, dict] = dataclasses.field(default_factory=dict)      # key -> its judgement (plain data)
    dispatch: dict[int, str | None] = dataclasses.field(default_factory=dict)  # bs -> winner key (None: eager)
    deploy_checks: list[dict] = dataclasses.field(default_factory=list)       # post-deploy timings (information)
    verdict: dict = dataclasses.field(default_factory=dict)    # the decision's typed verdict, Verdict.to_dict()
    measured_in: str = ""   # the context the confirm session ran in: "cpu with 2 torch threads"

    def take_verdict(self, verdict, diagnostic: bool = False) -> None:
        """Record a decision (aitune_ray.decision.Verdict): every judgement, the choice and its words.
        diagnostic: performance validation is in DIAGNOSTIC mode (the words say the comparison with eager was
        measured and reported, not used for the choice)."""
        from aitune_ray.decision.verdict import DISPATCH
        from aitune_ray.report.verdict import decision_text, judgement_text

        self.verdict = verdict.to_dict()
        for key, j in verdict.judgements.items():
            self.speedups[key] = j.median
            self.notes[key] = judgement_text(j, verdict, diagnostic)
            self.verdicts[key] = {"passed": j.accepted, "verdict": j.kind, "mix_speedup": j.median,
                                  "interval": dict(j.interval), "intervals": dict(j.intervals),
                                  "reason": self.notes[key], "confidence": verdict.confidence,
                                  "finalists": verdict.finalists}
        for key, why in verdict.pruned.items():
            self.notes.setdefault(key, why)
        self.chosen = None if verdict.chosen == DISPATCH else verdict.chosen
        self.decision = decision_text(verdict, {r.key: r.backend for r in self.results}, diagnostic)

    def chosen_result(self) -> BuildResult | None:
        return next((r for r in self.results if r.key == self.chosen), None)

    def rows(self) -> list[dict]:
        rows = [self._row("TorchEager (baseline)", "ok", baseline=True)]
        for r in self.results:
            rows.append(self._row(r.backend, r.status, r))
        return rows

    def _row(self, backend: str, status: str, r: BuildResult | None = None, baseline: bool = False) -> dict:
        corr = (r.correctness or {}) if r else {}
        verdict = self.verdicts.get(r.key, {}) if r else {}
        interval = verdict.get("interval") or {}
        row = {
            "module": self.module,
            "backend": backend,
            "config": _config_text(r.spec) if r else "",
            "status": status,
            "chosen": (r is not None and r.key == self.chosen) or (baseline and self.chosen is None),
            "speedup": 1.0 if baseline else self.speedups.get(r.key, math.nan),
            "speedup_low": 1.0 if baseline else interval.get("low", math.nan),
            "speedup_high": 1.0 if baseline else interval.get("high", math.nan),
            "rounds": interval.get("rounds", 0),
            "paired": bool(interval.get("paired", False)),
            "verdict": verdict.get("verdict", ""),
            "correctness_error": corr.get("max_error", math.nan) if r else 0.0,
            "tolerance": corr.get("tolerance", math.nan) if r else math.nan,
            "build_s": r.build_s if r else 0.0,
            "gpu": r.gpu if r else self.device,
            "error": r.error if r else "",
            "note": self.notes.get(r.key, "") if r else "",
            "what": describe_candidate(r) if r else "",
        }
        for bs in self.call_mix:
            timing = _timing(self.baseline, self.remeasured_baseline, bs) if baseline else (
                r.timing(bs) if r else None)
            raw = (self.baseline if baseline else (r.timings if r else {})).get(bs)
            first = Timing.from_dict(raw) if raw else None
            at = (verdict.get("intervals") or {}).get(bs) or (verdict.get("intervals") or {}).get(str(bs)) or {}
            row[f"speedup_bs{bs}"] = 1.0 if baseline else at.get("median", math.nan)
            row[f"speedup_low_bs{bs}"] = 1.0 if baseline else at.get("low", math.nan)
            row[f"speedup_high_bs{bs}"] = 1.0 if baseline else at.get("high", math.nan)
            row[f"throughput_bs{bs}"] = timing.throughput if timing else math.nan
            row[f"ms_per_call_bs{bs}"] = timing.median_ms if timing else math.nan        # serving loop
            row[f"latency_ms_bs{bs}"] = _latency(first, "p50")                              # single calls
            row[f"p90_ms_bs{bs}"] = _latency(first, "p90")
            row[f"raw_ms_per_call_bs{bs}"] = first.median_ms if first else math.nan
        return row

    def dataframe(self):
        import pandas as pd

        return pd.DataFrame(self.rows())

    def markdown(self) -> str:
        head = (f"### {str(self.module).replace(chr(10), ' ')} ({self.strategy} on {self.device}; recorded batch sizes "
                f"{_mix_text(self.call_mix)})\n\n"
                "Speedup: eager time over the candidate's, the median of the confirm session's paired rounds with "
                "its interval in brackets (at the decision's confidence, 1 - alpha/K); ms/call: back-to-back calls between two synchronizes (a serving loop); "
                "latency: single calls, p50/p90.\n\n")
        cols = ["backend", "config", "status", "correctness", "speedup [CI], rounds"]
        cols += [f"bs{bs} speedup [CI]; thr/s, ms/call; latency p50/p90 ms" for bs in self.call_mix]
        cols += ["build s", "verdict / note"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in self.rows():
            rounds = f", {row['rounds']} {'paired rounds' if row['paired'] else 'unpaired bursts'}" \
                if row["rounds"] else ""
            cells = [row["backend"] + (" **(chosen)**" if row["chosen"] else ""), row["config"], row["status"],
                     _num(row["correctness_error"]),
                     _interval(row["speedup"], row["speedup_low"], row["speedup_high"]) + rounds]
            for bs in self.call_mix:
                cells.append(f"{_interval(row[f'speedup_bs{bs}'], row[f'speedup_low_bs{bs}'], row[f'speedup_high_bs{bs}'])}; "
                             f"{_num(row[f'throughput_bs{bs}'])}, {_num(row[f'ms_per_call_bs{bs}'])}; "
                             f"{_num(row[f'latency_ms_bs{bs}'])}/{_num(row[f'p90_ms_bs{bs}'])}")
            note = "; ".join(t for t in (row["what"], row["note"] or row["error"]) if t)
            cells += [_num(row["build_s"]), note.replace("|", "/").replace("\n", " ")[:240]]
            lines.append("| " + " | ".join(str(c).replace("\n", " ").replace("|", "/") for c in cells) + " |")
        text = (head + "\n".join(lines) + self._remeasured_text() + _paragraph(self.eager_moved_text())
                + self._dispatch_text() + _paragraph(self.deploy_text()) + _paragraph(self.speedup_moved_text())
                + f"\n\nDecision: {self.decision}\n")
        return markdown_text(text, lines=True)   # names: printable, never HTML or a link

    def eager_moved(self) -> dict[int, tuple[float, float]]:
        """Batch sizes where eager's ms/call at its first timing and in the re-measure differ by EAGER_MOVED
        or more: bs -> (first, re-measured)."""
        return _moved(self._eager_readings(), EAGER_MOVED)

    def _eager_readings(self) -> dict[int, tuple[float, float]]:
        """Eager's ms/call at each recorded batch size: (first timing, latest re-measure), 0.0 where missing."""
        return {bs: ((self.baseline.get(bs) or {}).get("median_ms", 0.0),
                     (self.remeasured_baseline.get(bs) or {}).get("median_ms", 0.0)) for bs in self.call_mix}

    def eager_moved_text(self) -> str:
        """The report's sentence on eager_moved(), or ""."""
        moved = self.eager_moved()
        if not moved:
            return ""
        sizes = "; ".join(f"bs {bs}: {a:.3g} ms/call at its first timing, {b:.3g} in the re-measure "
                          f"({max(a, b) / min(a, b):.2f}x)" for bs, (a, b) in moved.items())
        return (f"Eager moved during this tuning ({sizes}). A call whose speed moves this much is bound by "
                "the host, and its speed moves with the host from minute to minute: a timing at another "
                "time, a user's own included, can differ by as much, and so can the speedups at that batch size.")

    def speedup_moved(self) -> dict[int, tuple[float, float]]:
        """Batch sizes where the chosen backend's median speedup in the re-measure and in its own post-deploy
        check differ by SPEEDUP_MOVED or more: bs -> (re-measured, checked)."""
        checked = self._chosen_check().get("intervals") or {}
        measured = (self.verdicts.get(self.chosen) or {}).get("intervals") or {}
        if not checked or not measured:
            return {}
        return _moved({bs: (_median_at(measured, bs), _median_at(checked, bs)) for bs in self.call_mix},
                      SPEEDUP_MOVED)

    def _chosen_check(self) -> dict:
        """The post-deploy check of the chosen backend (each candidate is checked once at most); {} if none."""
        if self.chosen is None:
            return {}
        return next((c for c in reversed(self.deploy_checks) if c.get("key") == self.chosen), None) or {}

    def speedup_moved_text(self) -> str:
        """The report's sentence on speedup_moved(), or ""."""
        moved = self.speedup_moved()
        if not moved:
            return ""
        sizes = "; ".join(f"bs {bs}: {a:.3g}x in the re-measure, {b:.3g}x in the post-deploy check"
                          for bs, (a, b) in moved.items())
        return (f"The chosen backend's speedup moved between the re-measure and the post-deploy check ({sizes}). "
                "Either the host's state moved it (where eager and the backend answer the host differently, the "
                "speedup itself moves, not only the times) or what was deployed differs from what was measured: "
                "a timing at another time, a user's own included, may read either figure or one beyond them.")

    def _dispatch_text(self) -> str:
        if not self.dispatch:
            return ""
        names = {r.key: r.backend + (f"({_config_text(r.spec)})" if _config_text(r.spec) else "")
                 for r in self.results}
        routes = ", ".join(f"bs {bs} -> {names.get(k, k) if k else 'eager'}" for bs, k in sorted(self.dispatch.items()))
        return f"\n\nBatch-size dispatch, winner per batch size: {routes}"

    def deploy_text(self) -> str:
        """The post-deploy timing in words (information only: the confirm session decided); ""."""
        parts = [f"{c['backend']}: {_interval(c['interval']['median'], c['interval']['low'], c['interval']['high'])} "
                 f"over the recorded mix" + (f" ({c['note']})" if c.get("note") else "")
                 for c in self.deploy_checks if c.get("interval")]
        parts += [f"{c['backend']}: {c['verdict']}" for c in self.deploy_checks if not c.get("interval")]
        if not parts:
            return ""
        return ("Post-deploy timing (the wrapped Module, as deployed, against eager; information only, the confirm "
                "session decided): " + "; ".join(parts))

    def _remeasured_text(self) -> str:
        """Finalists timed beside eager in the confirm session: their ms/call there, the first one in brackets."""
        if not self.remeasured_baseline:
            return ""
        parts = []
        for row, r in zip(self.rows(), [None] + self.results):
            if r is None or r.remeasured:
                cells = [f"bs{bs} {_num(row[f'ms_per_call_bs{bs}'])} ({_num(row[f'raw_ms_per_call_bs{bs}'])})"
                         for bs in self.call_mix]
                parts.append(f"{row['backend']}: " + ", ".join(cells))
        return "\n\nConfirm session (side by side with eager on one device), ms/call (first timing): " + "; ".join(parts)

    def to_dict(self) -> dict:
        # the results by their own to_dict: plain data only (a failed build's live exception stays out)
        data = dataclasses.asdict(dataclasses.replace(self, results=[]))
        data["results"] = [r.to_dict() for r in self.results]
        for r in data["results"]:
            r["artifacts"] = {k: (v if isinstance(v, str) else f"<{len(v)} bytes>") for k, v in r["artifacts"].items()}
        return data


def describe_candidate(result: BuildResult) -> str:
    """What a candidate really is, where its name could mislead: layers a quantizer changed, an empty
    kernel plan (state fields a backend exports for this)."""
    state = result.state or {}
    parts = []
    if "quantized_layers" in state:
        parts.append(f"quantized {state['quantized_layers']} of {state.get('quantizable_layers', '?')} layers")
    plan = state.get("plan_summary")
    if plan is not None:
        parts.append(plan)
    return "; ".join(parts)


def _moved(readings: dict[int, tuple[float, float]], factor: float) -> dict[int, tuple[float, float]]:
    """The batch sizes whose two readings (both positive) differ by factor or more: bs -> (first, second)."""
    return {bs: (a, b) for bs, (a, b) in readings.items() if a > 0 and b > 0 and max(a, b) / min(a, b) >= factor}


def _median_at(intervals: dict, bs: int) -> float:
    """The median of intervals at bs (keys are ints in a live report, strings once read back from JSON), 0 if none."""
    found = intervals.get(bs) or intervals.get(str(bs)) or {}
    return float(found.get("median") or 0.0)


def _paragraph(text: str) -> str:
    return f"\n\n{text}" if text else ""


def _latency(timing: Timing | None, which: str) -> float:
    if timing is None:
        return math.nan
    value = timing.latency_p50_ms if which == "p50" else timing.latency_p90_ms
    return math.nan if value is None else value


def _interval(median: float, low: float, high: float) -> str:
    if median is None or (isinstance(median, float) and math.isnan(median)):
        return "-"
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return _num(median, "x")
    return f"{median:.3f}x [{low:.3f}, {high:.3f}]"


def _timing(base: dict, remeasured: dict, bs: int) -> Timing | None:
    data = remeasured.get(bs) or base.get(bs)
    return Timing.from_dict(data) if data else None


def _config_text(spec: dict) -> str:
    """The settings of spec's config that are set (not None, False or empty), and those that differ from
    its class's defaults where the class is known: dynamic=False is not the default dynamic=None, so two
    variants of one backend read apart."""
    defaults = config_defaults(spec)

    def shown(key, value) -> bool:
        return value not in (None, False, {}, []) or (key in defaults and value != defaults[key])

    return ",".join(f"{k}={_value_text(v)}" for k, v in (spec.get("config") or {}).items() if shown(k, v))


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
        parts += [f"### {markdown_text(name)}\n\nStayed eager: {markdown_text(why)}\n"
                  for name, why in self.failures.items()]
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {"modules": [m.to_dict() for m in self.modules], "failures": dict(self.failures)}
