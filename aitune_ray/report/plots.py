"""The report's pictures (matplotlib, PNG bytes): each candidate's speedup as the decision read it, and the
schedule's timeline.

The speedup picture draws exactly the figures of the summary table (aitune_ray.report.answer.figures), on one
scale: a point per candidate and batch size at its median speedup over eager, its whisker the interval at the decision's confidence
of that same speedup, and its marker the verdict (star chosen, filled passed, hollow undecided, cross
rejected), so that no mark can read as a choice the decision did not make. Figures are made with
matplotlib's object API on the Agg canvas: nothing here touches pyplot's global state or needs a display.
"""

from __future__ import annotations

import io

from aitune_ray.runtime.printable import printable
from aitune_ray.report.answer import CHOSEN, FAILED, LOST, PASSED, UNDECIDED, confidence_words, figures, label, verdict
from aitune_ray.report.events import Span
from aitune_ray.records.results import CANCELLED, CRASHED, ERROR, OK, OOM, REJECTED, TIMED_OUT
from aitune_ray.report.model import ModuleReport

DPI = 100
WIDTH_IN = 11.0
FONT = 10
#: How each outcome is drawn over a bar of the timeline: (hatch, edge colour, marker at the bar's end).
OUTCOMES = {OK: ("", "black", None), ERROR: ("//", "red", None), REJECTED: ("\\\\", "darkorange", None),
            CRASHED: ("xx", "red", "X"), OOM: ("xx", "purple", "X"), TIMED_OUT: ("..", "red", "|"),
            CANCELLED: ("--", "grey", None), "unfinished": ("oo", "grey", None)}
#: How each kind of verdict is marked in the speedup picture: (marker, filled, size).
MARKS = {CHOSEN: ("*", True, 15), PASSED: ("o", True, 8), UNDECIDED: ("o", False, 8), LOST: ("X", True, 8)}
EAGER_COLOUR = "#555555"


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
    """A distinct colour per name, stable for a given set of names: tab10's ten, then tab20's others, then
    repeats (named in the legend)."""
    from matplotlib import colormaps

    unique = sorted(set(names))
    ten, twenty = colormaps["tab10"], colormaps["tab20"]
    pool = [ten(i) for i in range(10)] + [twenty(i) for i in range(1, 20, 2)]
    return {name: pool[i % len(pool)] for i, name in enumerate(unique)}


def speedup_points(module: ModuleReport) -> list[dict]:
    """What the speedup picture draws for one module: per candidate that was measured, its label, verdict
    kind and (median, low, high) per batch size, then over the recorded mix ("all")."""
    points = []
    for result in module.results:
        words, kind = verdict(module, result)
        found = figures(module, result.key)
        if kind == FAILED or not found:
            continue
        at = {**{f"bs {bs}": t for bs, t in found["bs"].items() if t}, **({"all": found["mix"]} if found["mix"] else {})}
        if at:
            points.append({"label": printable(label(result, 40)), "kind": kind, "verdict": words, "at": at})
    return points


def speedup_png(reports: list[ModuleReport]) -> bytes | None:
    """A panel per module: each measured candidate's speedup over eager per batch size and over the recorded
    calls, with its interval at the decision's confidence, on a log scale around eager's 1x."""
    panels = [(r, speedup_points(r)) for r in reports]
    panels = [(r, p) for r, p in panels if p]
    if not panels:
        return None
    figure = _figure(3.4 * len(panels))
    for index, (report, points) in enumerate(panels):
        axes = figure.add_subplot(len(panels), 1, index + 1)
        groups = list(dict.fromkeys(g for p in points for g in p["at"]))
        palette = colours([p["label"] for p in points])
        width = 0.7 / max(1, len(points))
        for i, point in enumerate(points):
            marker, filled, size = MARKS.get(point["kind"], MARKS[UNDECIDED])
            colour = palette[point["label"]]
            for g, group in enumerate(groups):
                triple = point["at"].get(group)
                if not triple:
                    continue
                median, low, high = triple
                x = g + (i - (len(points) - 1) / 2) * width
                yerr = [[max(0.0, median - low)], [max(0.0, high - median)]] if low is not None else None
                axes.errorbar([x], [median], yerr=yerr, fmt=marker, color=colour, markersize=size,
                              markerfacecolor=colour if filled else "white", markeredgecolor=colour,
                              markeredgewidth=1.5, elinewidth=1.5, capsize=4,
                              label=f"{point['label']}: {point['verdict']}" if g == 0 else None)
        axes.axhline(1.0, color=EAGER_COLOUR, linestyle="--", linewidth=1.2, label="eager (1x)")
        axes.set_yscale("log")
        axes.set_xticks(range(len(groups)), [("all recorded calls" if g == "all" else g) for g in groups],
                        fontsize=FONT)
        axes.tick_params(axis="y", labelsize=FONT)
        axes.set_ylabel("speedup over eager (x)", fontsize=FONT)
        axes.set_title(printable(f"{report.module} on {report.device}: speedup over eager, {confidence_words(report)}"),
                       fontsize=FONT + 1)
        axes.grid(axis="y", alpha=0.3, which="both")
        axes.legend(fontsize=FONT - 1, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)


def label_of(span: Span) -> str:
    """A span's name in the timeline's legend: its candidate, or for a module-wide task its phase."""
    return printable(span.candidate or f"{span.phase} ({span.module})")


def timeline_palette(spans: list[Span]) -> dict[str, tuple]:
    """A distinct colour for every name the timeline's legend shows (candidates and module-wide tasks alike)."""
    return colours([label_of(s) for s in spans])


def timeline_png(spans: list[Span]) -> bytes | None:
    """One row per actor (the driver's row last), a bar per phase of each task, coloured by candidate or
    module-wide task, hatched and edged by outcome; crashes and timeouts get a marker at the bar's end."""
    from matplotlib.patches import Patch

    if not spans:
        return None
    t0 = min(s.start for s in spans)
    total = max(1e-3, max(s.end for s in spans) - t0)
    rows = sorted({s.row for s in spans}, key=lambda r: (r == "driver", r))
    figure = _figure(1.5 + 0.6 * len(rows))
    axes = figure.add_subplot(1, 1, 1)
    palette = timeline_palette(spans)
    for span in spans:
        y = rows.index(span.row)
        hatch, edge, marker = OUTCOMES.get(span.status, ("++", "black", None))
        width = max(span.end - span.start, 1e-3)
        axes.barh(y, width, left=span.start - t0, height=0.7, color=palette[label_of(span)],
                  hatch=hatch, edgecolor=edge, linewidth=0.8)
        if width > 0.08 * total:
            axes.text(span.start - t0 + width / 2, y, span.phase, ha="center", va="center", fontsize=FONT - 1,
                      bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1})
        if marker:
            axes.plot(span.end - t0, y, marker=marker, color=edge, markersize=10, markeredgewidth=2)
    axes.set_yticks(range(len(rows)), rows, fontsize=FONT)
    axes.tick_params(axis="x", labelsize=FONT)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first event (driver wall clock)", fontsize=FONT)
    axes.set_title("schedule: a bar per task phase on each actor", fontsize=FONT + 1)
    axes.grid(axis="x", alpha=0.3)
    handles = [Patch(facecolor=colour, label=name) for name, colour in palette.items()]
    statuses = list(dict.fromkeys(s.status for s in spans))
    handles += [Patch(facecolor="white", hatch=OUTCOMES.get(st, ("++", "black", None))[0],
                      edgecolor=OUTCOMES.get(st, ("++", "black", None))[1], label=st) for st in statuses]
    axes.legend(handles=handles, fontsize=FONT - 1, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)
