"""The report's content, once, as a list of blocks that the Markdown and the HTML writers both render.

A block is ("heading", level, text), ("facts", [(name, value)]), ("table", caption, head, rows),
("text", text) or ("image", name, caption): the writers decide how each looks.
"""

from __future__ import annotations

import logging
from typing import Any

from aitune_ray.report.events import spans
from aitune_ray.report.tables import candidate_table, module_report, plan_tables

logger = logging.getLogger(__name__)

CLOCK_RULE = ("Times are the driver's wall clock when it observed each event (worker clocks are never read, "
              "so skewed node clocks cannot move bars); a bar also holds the dispatch and result latency.")


def blocks(run: dict) -> list[tuple]:
    """The blocks of one job's report (run: the job's JSON report as a dict)."""
    report = run.get("report") or {}
    host = str(run.get("host") or "")
    job = run.get("job") or {}
    out: list[tuple] = [("heading", 1, f"aitune-ray report: {run.get('job_path') or job.get('model') or 'job'}"),
                        ("facts", _facts(run))]
    modules = [module_report(m) for m in report.get("modules", [])]
    if modules or report.get("failures"):
        out.append(("heading", 2, "Modules"))
    for module in modules:
        mix = ", ".join(f"{bs} (x{n})" for bs, n in sorted(module.call_mix.items()))
        out.append(("heading", 3, f"{module.module}"))
        out.append(("text", f"{module.strategy} on {module.device}; recorded batch sizes {mix or 'none'}."))
        head, rows = candidate_table(module, host)
        out.append(("table", "candidates", head, rows))
        out.append(("text", f"Decision: {module.decision or '(none recorded)'}"))
        for said in (module.eager_moved_text(), module.deploy_text(), module.speedup_moved_text()):
            if said:
                out.append(("text", said))
        for users, plan_head, plan_rows in plan_tables(module):
            out.append(("table", f"kernel plan of {users}", plan_head, plan_rows))
    for name, why in (report.get("failures") or {}).items():
        out += [("heading", 3, str(name)), ("text", f"Stayed eager: {why}")]
    if not can_draw():
        out.append(("text", "No pictures: drawing them needs matplotlib (pip install 'aitune-ray[report]'); "
                    "'aitune-ray report' on this report's JSON draws them afterwards."))
        return out
    out.append(("heading", 2, "Throughput"))
    out.append(("image", "throughput", "Throughput per candidate and batch size against eager; whiskers: the "
                "speedup interval where the decision recorded one, else the p90-to-p50 latency range."))
    out.append(("heading", 2, "Schedule"))
    out.append(("image", "timeline", "One row per actor, a bar per task phase, coloured by candidate; hatching "
                "and edge give the outcome, X marks a crash or OOM, | a timeout. " + CLOCK_RULE))
    return out


def images(run: dict) -> dict[str, bytes | None]:
    """The PNGs the blocks name: {"throughput": ..., "timeline": ...} (None where there is nothing to draw)."""
    if not can_draw():   # matplotlib is an extra: the tables and plain lines are written without pictures
        logger.info("no report pictures: matplotlib is not installed (the 'report' extra)")
        return {"throughput": None, "timeline": None}
    from aitune_ray.report.plots import colours, throughput_png, timeline_png

    report = run.get("report") or {}
    modules = [module_report(m) for m in report.get("modules", [])]
    bars = spans(run.get("events") or [])
    # One colour per candidate across both pictures.
    palette = colours([r.backend for m in modules for r in m.results] + [s.candidate for s in bars])
    return {"throughput": throughput_png(modules, str(run.get("host") or ""), palette),
            "timeline": timeline_png(bars, palette)}


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
    return [(k, str(v)) for k, v in facts if v not in (None, "")]


def cell(value: Any) -> str:
    return " ".join(str(value).split())
