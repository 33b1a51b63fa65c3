"""The candidates of one module, twice: a narrow summary table (name, verdict, speedups with intervals), which
fits a laptop's window, and every candidate's details (config, correctness, timings, where it ran, its error
or note, its log), which the HTML folds.
"""

from __future__ import annotations

from pathlib import Path

from aitune_ray.report.answer import (WEIGHTING, confidence, figures, label, mix_outside, percent, screening,
                                     screening_words, speedup_words, verdict)
from aitune_ray.report.tables import batch_sizes, candidate_rows, extra_columns, speedup_text, value_text
from aitune_ray.report.model import ModuleReport, _num, describe_candidate

EAGER = "TorchEager (baseline)"


def summary_table(module: ModuleReport) -> tuple[list[str], list[list[str]]]:
    """Head and rows: one row for eager, one per candidate; the speedups are the decision's."""
    sizes = batch_sizes(module)
    level = confidence(module)
    head = ["candidate", "verdict", f"speedup [{percent(level) + ' ' if level else ''}interval]"] + [
        f"bs {bs}" for bs in sizes]
    chosen_eager = module.chosen is None
    rows = [[EAGER, "kept (chosen)" if chosen_eager else "baseline", "1x"] + ["1x" for _ in sizes]]
    for result in module.results:
        words, _ = verdict(module, result)
        found = figures(module, result.key)
        what = describe_candidate(result)   # what a name could hide: layers quantized, an empty kernel plan
        mix = speedup_words(found.get("mix")) if found else screening_words(screening(module, result.key))
        rows.append([label(result) + (f": {what}" if what else ""), words, mix]
                    + [speedup_words((found.get("bs") or {}).get(bs)) for bs in sizes])
    return head, rows


def verdict_kinds(module: ModuleReport) -> list[str]:
    """The kind of each summary row's verdict (eager first), for the HTML's row classes."""
    return ["chosen" if module.chosen is None else "baseline"] + [verdict(module, r)[1] for r in module.results]


def details(module: ModuleReport, host: str = "") -> list[tuple[str, list[tuple[str, str]]]]:
    """(title, [(name, value)]) per candidate: everything the summary leaves out. A column a decision rule
    adds to its rows (a verdict's own fields) is listed as it is."""
    rows = candidate_rows(module, host)
    sizes = batch_sizes(module)
    extra = extra_columns(rows, sizes)
    out = []
    for row, result in zip(rows[1:], module.results):
        words, _ = verdict(module, result)
        facts = [("verdict", words), ("config", row["config"] or "(defaults)"), ("status", row["status"]),
                 ("correctness error (tolerance)", f"{_num(row['correctness_error'])} ({_num(row['tolerance'])})"),
                 ("speedup over the recorded calls", speedup_text(row))]
        found = figures(module, result.key)
        if not found and screening(module, result.key):
            facts[-1] = ("speedup over the recorded calls", screening_words(screening(module, result.key)))
        elif mix_outside(found):
            facts.append(("why the figure over the recorded calls lies outside the per-size ones", WEIGHTING))
        for bs in sizes:
            facts.append((f"bs {bs}", f"speedup {speedup_text(row, bs)}; {_num(row.get(f'ms_per_call_bs{bs}'))} ms/call "
                                      f"in a serving loop; single calls p50/p90 {_num(row[f'latency_ms_bs{bs}'])}/"
                                      f"{_num(row[f'p90_ms_bs{bs}'])} ms; {_num(row[f'throughput_bs{bs}'])} samples/s"))
        facts += [("build", f"{_num(row['build_s'])} s"), ("ran on", ", ".join(x for x in (row["node"], row["gpu"]) if x))]
        facts += [(key, value_text(row.get(key))) for key in extra if key != "verdict" and value_text(row.get(key))]
        said = " ".join(str(row["error"] or row["note"] or "").split())
        if said:
            facts.append(("error" if row["error"] else "note", said))
        if row.get("log_path") and not Path(row["log_path"]).is_absolute():   # kept beside the report (logs.py)
            facts.append(("log", row["log_path"]))
        out.append((f"{label(result)}: {words}", [(k, v) for k, v in facts if v]))
    return out
