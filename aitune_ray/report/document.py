"""The report's content, once, as a list of blocks that the Markdown and the HTML writers both render.

A block is one of
    ("heading", level, text)            ("text", text)             ("facts", [(name, value)])
    ("answer", [line])                  the one-line answer per module, at the top
    ("warning", title, [sentence])      what the reader must know before trusting the figures
    ("list", title, [sentence])         a decision's reasons, a sentence an item
    ("table", caption, head, rows, row_kinds)
    ("details", [(title, [(name, value)])])   one per candidate; folded in HTML
    ("image", name, caption)
and the writers decide how each looks. No sentence is longer than about LIMIT characters: long ones are
split at their clauses.
"""

from __future__ import annotations

import re
from typing import Any

from aitune_ray.report.answer import answer
from aitune_ray.report.candidates import details, summary_table, verdict_kinds
from aitune_ray.report.events import spans
from aitune_ray.report.fitness import advice, unfit_reason
from aitune_ray.report.tables import module_report, plan_tables

LIMIT = 300
CLOCK_RULE = ("Times are the driver's wall clock when it observed each event (worker clocks are never read, "
              "so skewed node clocks cannot move bars); a bar also holds the dispatch and result latency.")


def blocks(run: dict, brief: bool = False) -> list[tuple]:
    """The blocks of one job's report (run: the job's JSON report as a dict). brief: the answer, the host's
    fitness and each module's summary and decision only (what the CLI prints and TuningReport.markdown())."""
    report = run.get("report") or {}
    host = str(run.get("host") or "")
    job = run.get("job") or {}
    recorded = [m for m in report.get("modules", []) if isinstance(m, dict)]
    modules = [module_report(m) for m in recorded]
    unfit = {m.module: unfit_reason(m, raw) for m, raw in zip(modules, recorded)}
    out: list[tuple] = [] if brief else [
        ("heading", 1, f"aitune-ray report: {run.get('job_path') or job.get('model') or 'job'}")]
    lines = [answer(m, unfit[m.module]) for m in modules]
    lines += [f"{name}: keep eager (it could not be tuned: {' '.join(str(why).split())})"
              for name, why in (report.get("failures") or {}).items() if name not in unfit]
    if lines:
        out.append(("answer", lines))
    if any(unfit.values()):
        device = run.get("device") or (modules[0].device if modules else "")
        said = [f"{name}: {why}." for name, why in unfit.items() if why]
        out.append(("warning", "Host: unfit to measure on", said + advice(str(device), run.get("host_state"))))
    if not brief:
        out.append(("facts", _facts(run)))
    if modules or report.get("failures"):
        out.append(("heading", 2, "Modules"))
    for module in modules:
        mix = ", ".join(f"{bs} (x{n})" for bs, n in sorted(module.call_mix.items()))
        out.append(("heading", 3, f"{module.module}"))
        out.append(("text", f"{module.strategy} on {module.device}; recorded batch sizes {mix or 'none'}."))
        head, rows = summary_table(module)
        out.append(("table", "candidates", head, rows, verdict_kinds(module)))
        said = [f"Decision: {module.decision or '(none recorded)'}"]
        said += [t for t in (module.eager_moved_text(), module.deploy_text(), module.speedup_moved_text()) if t]
        out.append(("list", "Why", [p for text in said for p in pieces(text)]))
        if brief:
            continue
        out.append(("details", [(title, [(k, v) for k, v in facts]) for title, facts in details(module, host)]))
        for users, plan_head, plan_rows in plan_tables(module):
            out.append(("table", f"kernel plan of {users}", plan_head, plan_rows, []))
    for name, why in (report.get("failures") or {}).items():
        out += [("heading", 3, str(name)), ("list", "Stayed eager", pieces(f"Stayed eager: {why}"))]
    if brief:
        return out
    if not can_draw():
        out.append(("text", "No pictures: drawing them needs matplotlib (pip install 'aitune-ray[report]'); "
                    "'aitune-ray report' on this report's JSON draws them afterwards."))
        return out
    out.append(("heading", 2, "Speedups"))
    out.append(("image", "speedup", "Each candidate's speedup over eager with its interval at the decision's "
                "confidence (as the summary table labels it), as the decision read them (log scale; 1x is eager). Star: chosen; filled: passed; hollow: undecided; cross: "
                "rejected. Failed candidates are not drawn."))
    out.append(("heading", 2, "Schedule"))
    out.append(("image", "timeline", "One row per actor, a bar per task phase, coloured by candidate; hatching "
                "and edge give the outcome, X marks a crash or OOM, | a timeout. " + CLOCK_RULE))
    return out


def pieces(text: str, limit: int = LIMIT) -> list[str]:
    """text as sentences of at most about limit characters: split at sentence ends, then clauses ("; "), then
    before a parenthesis, then at commas, outside brackets first; a part too long still is split inside them."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return [text] if text else []
    for separator, anywhere in ((". ", False), ("; ", False), (" (", False), (", ", False), ("; ", True), (", ", True)):
        parts = _split(text, separator, anywhere)
        if len(parts) > 1:
            merged: list[str] = []
            for part in parts:
                if merged and len(merged[-1]) + len(part) + 1 <= limit:
                    merged[-1] += " " + part
                else:
                    merged.append(part)
            return [q for part in merged for q in pieces(part, limit)]
    return [text[i:i + limit] for i in range(0, len(text), limit)]


def _split(text: str, separator: str, anywhere: bool) -> list[str]:
    """text split at separator (kept: "a;" "b", or "a" "(b" before a parenthesis), outside brackets unless anywhere."""
    parts, start, depth = [], 0, 0
    for i, char in enumerate(text):
        if text.startswith(separator, i) and (anywhere or depth == 0) and i > start:
            cut = i + 1 if separator != " (" else i
            parts.append(text[start:cut].strip())
            start = cut
        depth += 1 if char in "([" else -1 if char in ")]" and depth > 0 else 0
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def images(run: dict) -> dict[str, bytes | None]:
    """The PNGs the blocks name: {"speedup": ..., "timeline": ...} (None where there is nothing to draw)."""
    if not can_draw():   # matplotlib is an extra: the tables and plain lines are written without pictures
        return {"speedup": None, "timeline": None}
    from aitune_ray.report.plots import speedup_png, timeline_png

    report = run.get("report") or {}
    modules = [module_report(m) for m in report.get("modules", []) if isinstance(m, dict)]
    return {"speedup": speedup_png(modules), "timeline": timeline_png(spans(run.get("events") or []))}


def can_draw() -> bool:
    """Whether matplotlib can be imported here (the pictures need it; everything else does not)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _facts(run: dict) -> list[tuple[str, str]]:
    job = run.get("job") or {}
    check = run.get("checkpoint_check") or {}
    facts = [("host", run.get("host")), ("device", run.get("device")),
             ("executor", (job.get("executor") or {}).get("type")),
             ("elapsed", f"{run['elapsed_s']:.1f} s" if isinstance(run.get("elapsed_s"), (int, float)) else None),
             ("checkpoint", run.get("checkpoint") or "(none)")]
    if "max_abs_diff" in check:
        facts.append(("checkpoint check", f"max abs difference {check['max_abs_diff']:.3g}, "
                      f"{'matches' if check.get('passed') else 'differs'}"))
    elif check:
        facts.append(("checkpoint check", check.get("error") or check.get("skipped")))
    facts.append(("events recorded", str(len(run.get("events") or []))))
    return [(k, cell(v)) for k, v in facts if v not in (None, "")]


def cell(value: Any) -> str:
    return " ".join(str(value).split())
