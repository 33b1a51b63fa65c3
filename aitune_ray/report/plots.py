"""The report's pictures (matplotlib, PNG bytes): throughput per candidate and the schedule's timeline.

Figures are made with matplotlib's object API on the Agg canvas, so nothing here touches pyplot's global
state or needs a display.
"""

from __future__ import annotations

import io
import math

from aitune_ray.report.events import Span
from aitune_ray.report.tables import batch_sizes, candidate_rows
from aitune_ray.results import CANCELLED, CRASHED, ERROR, OK, OOM, REJECTED, TIMED_OUT
from aitune_ray.tune_strategy.report import ModuleReport

DPI = 100
WIDTH_IN = 10.0
#: How each outcome is drawn over a candidate's colour: (hatch, edge colour, marker at the bar's end).
OUTCOMES = {OK: ("", "black", None), ERROR: ("//", "red", None), REJECTED: ("\\\\", "darkorange", None),
            CRASHED: ("xx", "red", "X"), OOM: ("xx", "purple", "X"), TIMED_OUT: ("..", "red", "|"),
            CANCELLED: ("--", "grey", None), "unfinished": ("oo", "grey", None)}
EAGER_COLOUR = "#7f7f7f"


def _figure(height_in: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, max(2.5, height_in)), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def colours(names: list[str]) -> dict[str, tuple]:
    """One colour per candidate name, stable for a given list of names."""
    from matplotlib import colormaps

    palette = colormaps["tab20"]
    unique = sorted(set(names))
    return {name: palette(i % 20) for i, name in enumerate(unique)}


def throughput_png(reports: list[ModuleReport], host: str = "", palette: dict | None = None) -> bytes | None:
    """Grouped bars per module: throughput of eager and of every candidate that measured, at each batch
    size. Whiskers: the speedup interval the decision recorded (eager's throughput times its ends), else
    the p90 latency's throughput (the slow tail) up to the p50's."""
    measured = [(r, [row for row in candidate_rows(r, host) if _measured(row, r)]) for r in reports]
    measured = [(r, rows) for r, rows in measured if len(rows) > 0]
    if not measured:
        return None
    figure = _figure(3.2 * len(measured))
    palette = palette or colours([row["backend"] for _, rows in measured for row in rows[1:]])
    for index, (report, rows) in enumerate(measured):
        axes = figure.add_subplot(len(measured), 1, index + 1)
        sizes = batch_sizes(report)
        width = 0.8 / max(1, len(rows))
        base = rows[0] if rows[0]["backend"].startswith("TorchEager (") else None
        for i, row in enumerate(rows):
            xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(sizes))]
            heights = [_finite(row.get(f"throughput_bs{bs}")) for bs in sizes]
            low, high = [], []
            for bs, h in zip(sizes, heights):
                lo, hi = _whisker(row, base, bs, h)
                low.append(max(0.0, h - lo))
                high.append(max(0.0, hi - h))
            colour = EAGER_COLOUR if row is base else palette.get(row["backend"], EAGER_COLOUR)
            label = row["backend"] + (" (chosen)" if row["chosen"] else "")
            axes.bar(xs, heights, width=width * 0.95, color=colour, label=label, edgecolor="black",
                     linewidth=1.5 if row["chosen"] else 0.4, yerr=[low, high], capsize=2, error_kw={"lw": 0.8})
        axes.set_xticks(range(len(sizes)), [f"batch {bs}" for bs in sizes])
        axes.set_ylabel("samples / s")
        axes.set_title(f"{report.module}: throughput by batch size ({report.device})", fontsize=10)
        axes.grid(axis="y", alpha=0.3)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)


def _measured(row: dict, report: ModuleReport) -> bool:
    return any(_finite(row.get(f"throughput_bs{bs}")) > 0 for bs in report.call_mix)


def _whisker(row: dict, base: dict | None, bs: int, height: float) -> tuple[float, float]:
    span = row.get(f"speedup_interval_bs{bs}")
    eager = _finite(base.get(f"throughput_bs{bs}")) if base else 0.0
    if span and eager > 0:
        return eager * span[0], eager * span[1]
    p90 = _finite(row.get(f"p90_ms_bs{bs}"))
    return (bs / (p90 / 1e3), height) if p90 > 0 else (height, height)


def _finite(value) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def label(span: Span) -> str:
    """A span's name in the timeline's legend: its candidate, or for a module-wide task its phase."""
    return span.candidate or f"{span.phase} ({span.module})"


def timeline_png(spans: list[Span], palette: dict | None = None) -> bytes | None:
    """One row per actor (the driver's row last), a bar per phase of each task, coloured by candidate,
    hatched and edged by outcome; crashes and timeouts get a marker at the bar's end."""
    from matplotlib.patches import Patch

    if not spans:
        return None
    t0 = min(s.start for s in spans)
    rows = sorted({s.row for s in spans}, key=lambda r: (r == "driver", r))
    figure = _figure(1.2 + 0.45 * len(rows))
    axes = figure.add_subplot(1, 1, 1)
    palette = dict(palette or colours([label(s) for s in spans]))
    for span in spans:   # module-wide tasks (baseline, re-measure) in grey
        palette.setdefault(label(span), EAGER_COLOUR)
    for span in spans:
        y = rows.index(span.row)
        hatch, edge, marker = OUTCOMES.get(span.status, ("++", "black", None))
        width = max(span.end - span.start, 1e-3)
        axes.barh(y, width, left=span.start - t0, height=0.7, color=palette[label(span)],
                  hatch=hatch, edgecolor=edge, linewidth=0.8)
        if width > 0.06 * max(1e-3, max(s.end for s in spans) - t0):
            axes.text(span.start - t0 + width / 2, y, span.phase, ha="center", va="center", fontsize=6)
        if marker:
            axes.plot(span.end - t0, y, marker=marker, color=edge, markersize=9, markeredgewidth=2)
    axes.set_yticks(range(len(rows)), rows, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first event (driver wall clock)")
    axes.set_title("schedule: a bar per task phase on each actor", fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    shown = {label(s) for s in spans}
    handles = [Patch(facecolor=colour, label=name) for name, colour in palette.items() if name in shown]
    statuses = list(dict.fromkeys(s.status for s in spans))
    handles += [Patch(facecolor="white", hatch=OUTCOMES.get(st, ("++", "black", None))[0],
                      edgecolor=OUTCOMES.get(st, ("++", "black", None))[1], label=st) for st in statuses]
    axes.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)
