"""The report's rows, from a job's JSON report: each candidate's figures, kernel plans.

Rows come from the strategy's own ModuleReport.rows() (rebuilt from the JSON), so that a column the
decision rule adds to its rows (a speedup interval, a verdict) reaches the report without a change here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from aitune_ray.records.results import BuildResult
from aitune_ray.report.model import ModuleReport, _num

_BATCH_KEYED = ("call_mix", "baseline", "remeasured_baseline", "dispatch")
#: Row keys that the candidates table shows in columns of its own.
_SHOWN = {"module", "backend", "config", "status", "chosen", "speedup", "correctness_error", "tolerance",
          "build_s", "gpu", "error", "note", "node", "log_path", "speedup_low", "speedup_high", "total_s"}
_INTERVAL_NAMES = (("speedup_lo", "speedup_hi"), ("speedup_low", "speedup_high"),
                   ("speedup_lower", "speedup_upper"))


def module_report(data: dict) -> ModuleReport:
    """A ModuleReport from its to_dict() form (batch-size keys, which JSON made strings, become ints)."""
    known = {f.name for f in dataclasses.fields(ModuleReport)}
    fields = {k: v for k, v in data.items() if k in known}
    for name in _BATCH_KEYED:
        if isinstance(fields.get(name), dict):
            fields[name] = {int(k): v for k, v in fields[name].items()}
    fields["results"] = [BuildResult.from_dict(_known_result_fields(r)) for r in data.get("results", [])]
    return ModuleReport(**fields)


def _known_result_fields(data: dict) -> dict:
    known = {f.name for f in dataclasses.fields(BuildResult)}
    return {k: v for k, v in data.items() if k in known}


def batch_sizes(report: ModuleReport) -> list[int]:
    return sorted(report.call_mix)


def candidate_rows(report: ModuleReport, host: str = "") -> list[dict]:
    """ModuleReport.rows(), each with node and log path, and per batch size the decision's speedup against
    eager and its interval where the decision recorded one (speedup_bsN, speedup_interval_bsN = (lo, hi); NaN
    and None where it did not: a candidate pruned at screening, or never compared with eager)."""
    rows = report.rows()
    for row, result in zip(rows, [None] + report.results):
        row["node"] = result.node if result else host
        row["log_path"] = result.log_path if result else ""
        row["total_s"] = result.total_s if result else 0.0
        for bs in batch_sizes(report):   # the decision's figures only: a candidate's first timing against
            row[f"speedup_interval_bs{bs}"] = interval(row, bs)   # eager's baseline is two moments, never a speedup
    return rows


def interval(row: dict, bs: int) -> tuple[float, float] | None:
    """The speedup interval at batch size bs, under whichever of the usual names the row carries it."""
    for name in (f"speedup_ci_bs{bs}", f"speedup_interval_bs{bs}", f"ci_bs{bs}"):
        value = row.get(name)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_number(v) for v in value):
            return float(value[0]), float(value[1])
        if isinstance(value, dict) and _is_number(value.get("lo", value.get("low"))):
            return float(value.get("lo", value.get("low"))), float(value.get("hi", value.get("high")))
    for lo, hi in _INTERVAL_NAMES:
        a, b = row.get(f"{lo}_bs{bs}"), row.get(f"{hi}_bs{bs}")
        if _is_number(a) and _is_number(b):
            return float(a), float(b)
    return None


def extra_columns(rows: list[dict], sizes: list[int]) -> list[str]:
    """Row keys that no column of the table shows (added by the decision rule, such as a verdict): shown as
    they are. Per-batch-size keys other than the table's own stay in the JSON only."""
    per_bs = re.compile(r"_bs\d+$")
    seen: list[str] = []
    for row in rows:
        for key in row:
            if key not in _SHOWN and key not in seen and not per_bs.search(key):
                seen.append(key)
    return seen


def speedup_text(row: dict, bs: int | None = None) -> str:
    """The speedup at batch size bs (None: over the recorded mix), with its interval where there is one."""
    if bs is None:
        text, low, high = _num(row.get("speedup"), "x"), row.get("speedup_low"), row.get("speedup_high")
        span = (low, high) if _is_number(low) and _is_number(high) and not row["backend"].endswith("(baseline)") \
            else None
    else:
        text, span = _num(row.get(f"speedup_bs{bs}"), "x"), row.get(f"speedup_interval_bs{bs}")
    return f"{text} [{_num(span[0])}, {_num(span[1])}]" if span else text


def value_text(value: Any) -> str:
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={value_text(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def plan_tables(report: ModuleReport) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each distinct kernel plan of the module's candidates: (which candidates, header, rows).

    A row per (function, provider) the forge tried: the provider, its time, speedup, error and whether
    it was chosen."""
    plans: dict[str, tuple[list[str], list[dict]]] = {}
    for result in report.results:
        plan = (result.state or {}).get("kernel_plan") or (result.spec or {}).get("kernel_plan")
        if not isinstance(plan, dict) or not plan.get("results"):
            continue
        ident = json.dumps(plan["results"], sort_keys=True, default=str)
        plans.setdefault(ident, ([], plan["results"]))[0].append(result.backend)
    head = ["function", "provider", "source", "status", "chosen", "median ms", "speedup", "max error (tolerance)",
            "GPU", "error"]
    out = []
    for users, records in plans.values():
        rows = [[str(r.get("function", "")), str(r.get("description", "")), str(r.get("source", "")),
                 str(r.get("status", "")), "yes" if r.get("selected") else "", _num(_float(r.get("median_ms"))),
                 _num(_float(r.get("speedup")), "x"),
                 f"{_num(_float(r.get('max_error')))} ({_num(_float(r.get('tolerance')))})", str(r.get("gpu", "")),
                 " ".join(str(r.get("error") or "").split())[:300]] for r in records]
        out.append((", ".join(users), head, rows))
    return out


def _float(value) -> float:
    return float(value) if _is_number(value) else math.nan


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)

