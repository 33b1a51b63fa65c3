"""Writes benchmarks/RESULTS.md from the records in benchmarks/results/: one table per question, one row per run,
each with its date, machine and command; and how a benchmark writes its record (publish).

    python benchmarks/results_table.py                      # rewrite RESULTS.md from benchmarks/results/*.json
    python benchmarks/results_table.py record decisions OUT/decisions.json --machine "1 x H200" \\
        --command "python benchmarks/decisions.py --models vit --runs 3" [--date 2026-12-05] [--note ...]

A record is one JSON file: {"benchmark", "date", "machine", "command", "note", "result"}, where result is
what the benchmark wrote; a benchmark's own JSON that names its script, date, machine and command
({"script": "benchmarks/X.py", "date", "machine", "command", ...}, as pipeline_schedule.py writes) is read as
a record of X whose result is the whole file (scripts that call publish() below write records themselves; `record` wraps the JSON
of one that does not, such as decisions.py and ray_vs_inline.py). A record converted from an older table may
hold "rows" (the table's cells) instead of "result". Each benchmark's summary below reads its own result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

RESULTS, TABLE = HERE / "results", HERE / "RESULTS.md"
AGREE, SLOWER, WITHIN_BEST = 0.05, 0.03, 0.03   # decisions.py's targets, as its summary counts them


# ----- how a benchmark hands on its table and its record ---------------------------------------------------

def machine() -> str:
    """The machine in a few words: its GPUs (or CPUs) and torch's version."""
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        what = f"{len(names)} x {names[0]}"
    else:
        what = f"{os.cpu_count()} CPUs ({platform.machine()})"
    return f"{what}, torch {torch.__version__}"


def command() -> str:
    """The command line that ran this benchmark, as a user would type it from the repository root."""
    script = Path(sys.argv[0])
    name = f"benchmarks/{script.name}" if script.parent.name == "benchmarks" else str(script)
    return " ".join(["python", name] + [shlex.quote(a) for a in sys.argv[1:]])


def publish(text: str, out: str | None, data, benchmark: str | None = None) -> None:
    """Print text (markdown); given out, write it there and, with a .json suffix, the record of data."""
    print(text)
    if not out:
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
    path.with_suffix(".json").write_text(json.dumps(record_of(data, benchmark), indent=1, default=str) + "\n")


def record_of(data, benchmark: str | None = None) -> dict:
    """data as a record: the benchmark's name, today's date, this machine, this command."""
    return {"benchmark": benchmark or Path(sys.argv[0]).stem, "date": datetime.date.today().isoformat(),
            "machine": machine(), "command": command(), "note": "", "result": data}


def fresh_caches(env: dict) -> dict:
    """env with new, empty Inductor and Triton cache folders, as a new process on a new machine has them."""
    return dict(env, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton-"),
                TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))


# ----- helpers of the summaries ------------------------------------------------------------------------------

def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _s(value) -> str:
    return "-" if value is None else f"{value:.1f}"


# ----- one summary per benchmark: its result -> the cells of its table's row(s) ------------------------------

def backends_rows(result: dict) -> list[dict]:
    """backends.py: the report of one tuning (TuningReport.to_dict()), a row per module."""
    rows = []
    for module in result.get("modules", []):
        results = module.get("results", [])
        statuses: dict[str, int] = {}
        for r in results:
            statuses[r.get("status", "?")] = statuses.get(r.get("status", "?"), 0) + 1
        chosen = next((r for r in results if r.get("key") == module.get("chosen")), None)
        speedup = (module.get("speedups") or {}).get(module.get("chosen"))
        rows.append({"module": module.get("module", "?"), "candidates": len(results),
                     "statuses": ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())),
                     "chosen": "eager" if chosen is None else
                     f"{chosen.get('backend')}" + (f" ({speedup:.2f}x over the mix)" if speedup else ""),
                     "decision": module.get("decision", "")})
    return rows


def wrapper_rows(result: dict) -> list[dict]:
    """backends.py --wrapper-cost: microseconds per call of each layer."""
    return [{layer + ", us": f"{us:.2f}" for layer, us in result["us_per_call"].items()}]


def ray_vs_inline_rows(result: dict) -> list[dict]:
    """ray_vs_inline.py: runs of one job; medians of each kind, their ratio, and the ratio without the
    re-measure (whose length follows how many candidates it re-times, and moves the raw wall most)."""
    runs = list((result.get("runs") or {}).values()) or [r for r in (result.get("inline"), result.get("ray")) if r]
    runs = [r for r in runs if not r.get("failed")]
    inline = [r for r in runs if r.get("kind") == "inline"]
    ray = [r for r in runs if r.get("kind") == "ray"]

    def less(r):
        return (r.get("phases") or {}).get("wall less re-measure s")

    def chosen(rs):
        return ", ".join(sorted({c for r in rs for c in (r.get("chosen") or {}).values()})) or "-"

    wall_i, wall_r = _median(r["wall_s"] for r in inline), _median(r["wall_s"] for r in ray)
    less_i, less_r = _median(less(r) for r in inline), _median(less(r) for r in ray)
    gpus = max((r.get("gpus") or 1 for r in ray), default=result.get("gpus"))
    return [{"job": f"{result.get('model', '?')}, {len(result.get('backends') or [])} candidates",
             "GPUs": gpus, "runs (inline / Ray)": f"{len(inline)} / {len(ray)}",
             "inline wall s": _s(wall_i), "Ray wall s": _s(wall_r), "Ray / inline": _ratio(wall_r, wall_i),
             "less the re-measure": _ratio(less_r, less_i),
             "chosen (inline; Ray)": f"{chosen(inline)}; {chosen(ray)}"}]


def scaling_rows(result: dict) -> list[dict]:
    """schedule_sim.py on a ray_vs_inline.py result that has the candidates' times: a SIMULATION."""
    import schedule_sim

    data = {k: result[k] for k in ("model", "device", "gpus", "inline", "ray") if result.get(k)}
    if not (data.get("inline") or data.get("ray")):
        return []
    source = "inline" if data.get("inline") else "ray"
    sims = {n: schedule_sim.simulate(data, n, source=source) for n in (1, 2, 4, 8)}
    row = {"job": f"{result.get('model', '?')}, {len(result.get('backends') or [])} candidates ({source} times)",
           "critical path s": _s(sims[1]["critical_path_s"])}
    row.update({f"{n} GPU{'s' if n > 1 else ''}, longest first, s": _s(sim["longest_first_s"])
                for n, sim in sims.items()})
    return [row]


def decisions_rows(result: dict) -> list[dict]:
    """decisions.py: per model, its tunings' (run, batch size) pairs counted against the targets."""
    by_model: dict[str, list] = {}
    for run in result.get("runs", []):
        by_model.setdefault(run.get("model", "?"), []).append(run)
    rows = []
    for model, runs in by_model.items():
        pairs = [row for run in runs for row in run.get("rows", [])]

        def count(key):   # "-" where the runs did not record it (results from before that figure existed)
            known = [p for p in pairs if key in p]
            return f"{sum(bool(p[key]) for p in known)} of {len(known)}" if known else "-"

        dispatch = [p for p, run in ((p, run) for run in runs for p in run.get("rows", [])) if run.get("dispatch")]
        rows.append({"model": model, "tunings": len(runs), "chosen": ", ".join(sorted({p.get("chosen") or "eager"
                                                                                        for p in pairs})),
                     "user reads it slower than eager (target 0)": count("slower_than_eager"),
                     "tuner within 5% of the user": count("agrees"),
                     "the user's repeat within 5% of the user": count("user_repeats_agree"),
                     "dispatch within 3% of the best single": (f"{sum(bool(p.get('within_best')) for p in dispatch)}"
                                                               f" of {len(dispatch)}" if dispatch else "-")})
    return rows


def kernel_forge_rows(result: list) -> list[dict]:
    """kernel_forge.py: per SDPA shape."""
    return [{"shape (B,H,S,D)": r["shape"], "default ms": f"{r['default_ms']:.4g}" if r.get("default_ms") else "-",
             "best alone": r.get("best_alone", "-"), "plan": r.get("chosen", "-"),
             "plan within 3% of the best alone": "yes" if r.get("within") else "no",
             "tuned module / eager": f"{r['speedup']:.2f}x" if r.get("speedup") else "-",
             "module kept eager": "yes" if r.get("kept_eager") else "no"} for r in result]


def ort_gpu_rows(result: dict) -> list[dict]:
    """ort_gpu.py: per model and batch size, eager's time and each variant's speedup over it."""
    rows = []
    for model, found in result.get("models", {}).items():
        by_bs: dict[int, dict] = {}
        for r in found.get("rows", []):
            by_bs.setdefault(r["batch_size"], {})[r["variant"]] = r
        for bs, variants in sorted(by_bs.items()):
            eager = variants.get("eager", {}).get("ms_per_call")
            rows.append({"model": model, "batch": bs, "eager ms": f"{eager:.3f}" if eager else "-",
                         "speedup over eager": ", ".join(f"{v} {r['speedup_vs_eager']:.2f}x"
                                                         for v, r in variants.items() if v != "eager")})
    return rows


def memory_rows(result: list) -> list[dict]:
    """memory.py: peaks per run kind, the largest candidate count against the smallest."""
    rows = []
    for run in sorted({r["run"] for r in result}):
        mine = sorted((r for r in result if r["run"] == run and "error" not in r), key=lambda r: r["candidates"])
        if len(mine) < 2:
            rows.append({"run": run, "candidates": "-", "peak device MB": "failed", "ratio": "-",
                         "peak RSS MB": "-", "RSS ratio": "-"})
            continue
        low, high = mine[0], mine[-1]
        device = (f"{low['peak_device_mb']:.0f} / {high['peak_device_mb']:.0f}" if low["peak_device_mb"] else "-")
        rows.append({"run": run, "candidates": f"{low['candidates']} / {high['candidates']}",
                     "peak device MB": device,
                     "ratio": _ratio(high["peak_device_mb"], low["peak_device_mb"]),
                     "peak RSS MB": f"{low['peak_rss_mb']:.0f} / {high['peak_rss_mb']:.0f}",
                     "RSS ratio": _ratio(high["peak_rss_mb"], low["peak_rss_mb"])})
    return rows


def driver_memory_rows(result: dict) -> list[dict]:
    """memory.py --cycles: what the driver keeps per tune + save + load cycle, from cycle 3 on."""
    cycles = result.get("cycles") or []
    return [{"builds": "in a child process" if result.get("contain") else "in the driver", "cycles": len(cycles),
             "RSS MB, first / last": (f"{cycles[0]['rss_mb']:.0f} / {cycles[-1]['rss_mb']:.0f}" if cycles else "-"),
             "MB per cycle": f"{result['per_cycle_mb']:.2f}" if "per_cycle_mb" in result else "-",
             "objects per cycle": f"{result['per_cycle_objects']:.0f}" if "per_cycle_objects" in result else "-"}]


def pipeline_schedule_rows(result: dict) -> list[dict]:
    """pipeline_schedule.py: per number of modules, the median wall against one module's and the goal."""
    return [{"modules": r["modules"], "builds": r["builds"], "wall s (median)": _s(r.get("wall_s")),
             "x one module": f"{r['over_one_module']:.2f}x" if r.get("over_one_module") else "-",
             "goal": f"{r['goal']:.2f}x" if r.get("goal") else "-",
             "met": "-" if r.get("met") is None else "yes" if r["met"] else "NO"} for r in result.get("rows", [])]


def decision_characteristics_rows(result: dict) -> list[dict]:
    """decisions.py --operating-characteristics: per scenario and noise, how often it is chosen (a SIMULATION)."""
    return [{"scenario": r["what"], "noise": f"{r['noise']:.0%}", "chosen": f"{r['chosen']:.1%}",
             "tunings": r["tunings"]} for r in result.get("rows", [])]


def decision_power_rows(result: dict) -> list[dict]:
    """decision_power.py: per chooser, finalists and true speedup, the share planned at each noise (a SIMULATION;
    at 1.00x the false-win rate)."""
    return [{"chooser": r["chooser"], "finalists": r["field"], "true speedup": f"{r['speedup']:.2f}x",
             **{f"{float(n):.0%} noise": f"{v:.1%}" for n, v in r["chosen"].items()}, "tunings": result["tunings"]}
            for r in result.get("rows", [])]


def resume_rows(result: dict) -> list[dict]:
    """resume.py: a cold run against a killed and resumed one (targets: resumed <= 0.6x, killed + resumed
    <= 1.1x the cold run, the same decision)."""
    cold = result["cold_s"]
    return [{"candidates": result["candidates"], "cold s": _s(cold),
             "killed at": f"{result['killed_at']} results", "resumed / cold": _ratio(result["resumed_s"], cold),
             "killed + resumed / cold": _ratio(result["killed_s"] + result["resumed_s"], cold),
             "same decision": "yes" if result["same_decision"] else "NO"}]


def jit_throughput_rows(result: dict) -> list[dict]:
    """jit_throughput.py: the measuring overhead, the verdict and when it came, the pace before and after it
    (medians of jit / eager over calls made in pairs)."""
    switch = result.get("switch")
    return [{"model": result["config"]["model"], "backend": result["config"]["backend"],
             "overhead jit / eager": result["overhead_jit_over_eager"],
             "verdict": f"{result['verdict']['state']} ({result['verdict']['info']})"[:120],
             "switch": "none" if switch is None else f"{switch['seconds']} s (call {switch['module_call']})",
             "before jit / eager": result["before_switch_jit_over_eager"],
             "after jit / eager": result["after_switch_jit_over_eager"]}]


def span(i: dict | None) -> str:
    """An interval of a speedup: 1.46x [1.46, 1.47]."""
    return f"{i['median']:.2f}x [{i['low']:.2f}, {i['high']:.2f}]" if i else "-"


def figures_agree_rows(result: dict) -> list[dict]:
    """figures_agree.py: a row per run (inline, Ray) and one for the user's loop, and whether they overlap."""
    rows = [{"where": r["executor"], "chosen": r.get("chosen", "failed"), "speedup [95%]": span(r.get("interval")),
             "measured in": r.get("measured_in", ""),
             "as loaded": ((r.get("as_loaded") or {}).get("agreement") or "-")} for r in result.get("runs", [])]
    loop = result.get("user_loop")
    if loop:
        rows.append({"where": f"user's loop, {loop['threads']} threads", "chosen": loop["backend"],
                     "speedup [95%]": span(loop["interval"]),
                     "measured in": f"{result.get('device', 'cpu')} with {loop['threads']} torch threads",
                     "as loaded": "-"})
    agree = result.get("overlap")
    model = result.get("model_args")
    for row in rows:
        sizes = ", ".join(str(b) for b in result.get("batch_sizes") or [4, 16])
        row["model"] = f"width {model['width']}, {model['blocks']} blocks, bs {sizes}" if model else "the job's"
        row["all agree"] = "yes" if agree else "NO" if agree is False else "-"
    return rows


def zoo_rows(result: dict) -> list[dict]:
    """zoo.py: a row per model, a cell per backend (build, correct, round trip, speedup; or the failure, whose
    and what), then the totals per backend (passes of runs)."""
    rows_in = result.get("rows", [])
    backends = list(dict.fromkeys(r["backend"] for r in rows_in if r.get("backend") not in (None, "-")))
    rows: dict[str, dict] = {}
    for r in rows_in:
        row = rows.setdefault(r["model"], {"model": r["model"], "library": r.get("library", "")})
        if r.get("build") == "unavailable" and r.get("backend") not in (None, "-"):   # this backend only
            row[r["backend"]] = "unavailable: " + r.get("error", "")[:90]
            continue
        if r.get("build") == "unavailable":
            row.update({b: "-" for b in backends})
            row["unavailable"] = r.get("error", "")[:120]
            continue
        row[r["backend"]] = _zoo_cell(r)
    for row in rows.values():
        row.setdefault("unavailable", "")
        for b in backends:
            row.setdefault(b, "n/a")
    total = {"model": "**passed (build / correct / round trip, of runs)**" + (
        "" if result.get("complete", True) else " of a run stopped part-way: models after the last row not reached"),
             "library": "", "unavailable": ""}
    for b in backends:
        runs = [r for r in rows_in if r.get("backend") == b and r.get("build") != "unavailable"]
        total[b] = (f"{sum(r['build'] == 'ok' for r in runs)} / {sum(bool(r.get('correct')) for r in runs)} / "
                    f"{sum(bool(r.get('round_trip')) for r in runs)} of {len(runs)}")
    return list(rows.values()) + [total]


def _zoo_cell(r: dict) -> str:
    speedup = r.get("speedup")
    if r.get("build") == "ok" and r.get("correct") and r.get("round_trip"):
        return "pass" + (f", {speedup:.2f}x" if isinstance(speedup, float) else "")
    step = ("build " + r.get("build", "?") if r.get("build") != "ok" else
            "correct NO" if not r.get("correct") else "round trip NO")
    return f"{step} ({r.get('failure') or '?'}): {(r.get('error') or '')[:90]}"


#: The questions, in the order RESULTS.md gives them: (benchmark, title, how to run it, summary).
QUESTIONS = (
    ("backends", "Which backend wins on my model?", "python benchmarks/backends.py --model encoder --out OUT/b.md",
     backends_rows),
    ("wrapper", "What does the deployed module's wrapper cost per call?",
     "python benchmarks/backends.py --wrapper-cost --out OUT/w.md", wrapper_rows),
    ("ray_vs_inline", "Is Ray faster than inline on my job?",
     "python benchmarks/ray_vs_inline.py --model encoder --runs inline,ray:1,inline,ray:1 --out OUT/r.md",
     ray_vs_inline_rows),
    ("ray_vs_inline", "How would the same job scale on more GPUs? (a SIMULATION from measured candidate times)",
     "python benchmarks/schedule_sim.py OUT/r.json", scaling_rows),
    ("pipeline_schedule", "Do several modules tune as one schedule, in about the time of one?",
     "python benchmarks/pipeline_schedule.py --repeats 3 --out OUT/p.json", pipeline_schedule_rows),
    ("decisions", "Do the tuner's decisions hold in a user's own timing loop?",
     "python benchmarks/decisions.py --models vit --runs 3 --dispatch --out OUT", decisions_rows),
    ("decision_characteristics", "How often does the decision procedure choose what it should? (a SIMULATION)",
     "python benchmarks/decisions.py --operating-characteristics --tunings 1000", decision_characteristics_rows),
    ("decision_power", "How often does the default rule plan a truly faster backend or kernel, and a no faster one? "
     "(a SIMULATION)", "python benchmarks/decision_power.py --tunings 1000", decision_power_rows),
    ("kernel_forge", "Which attention kernel does the kernel forge pick per shape, and does it pay?",
     "python benchmarks/kernel_forge.py --out OUT/k.md", kernel_forge_rows),
    ("ort_gpu", "How does ONNX Runtime on the GPU compare with eager and Inductor?",
     "python benchmarks/ort_gpu.py --out OUT", ort_gpu_rows),
    ("memory", "Does peak memory grow with the number of candidates?",
     "python benchmarks/memory.py --device cuda --candidates 2,8 --buffer-mb 4096 --ray --out OUT/m.md",
     memory_rows),
    ("driver_memory", "Does the driver keep memory from one tune + save + load cycle to the next?",
     "python benchmarks/memory.py --cycles 12 [--contain] --out OUT/driver.md", driver_memory_rows),
    ("resume", "What does a killed job cost once resumed?", "python benchmarks/resume.py --out OUT/resume.md",
     resume_rows),
    ("jit_throughput", "Does a program keep its pace while it is tuned just in time, and when does it switch?",
     "python benchmarks/jit_throughput.py --model mlp --out OUT", jit_throughput_rows),
    ("figures_agree", "Do inline, Ray and a user's loop read the same speedup, in the stated serving context?",
     "python benchmarks/figures_agree.py --out OUT/agree.md", figures_agree_rows),
    ("zoo", "Which real models tune end to end, on which backends? (pass: built, correct in type and every "
     "tensor, and equal after ait.save + ait.load into a fresh model; failures: library = the backend's own "
     "library raised it, here = this project; the speedup is the tuner's short confirm session, not a user's loop: "
     "a pass/fail table, not a speed claim)", "python benchmarks/zoo.py --out OUT/zoo.md", zoo_rows),
)


OWN_FIELDS = ("script", "date", "machine", "command")


def as_record(data) -> dict | None:
    """data as a record: a record as it is, or a benchmark's own JSON naming its script, date, machine and
    command (see the module docstring); None when it is neither."""
    if isinstance(data, dict) and "benchmark" in data:
        return data
    if isinstance(data, dict) and all(isinstance(data.get(k), str) for k in OWN_FIELDS):
        return {"benchmark": Path(data["script"]).stem, "date": data["date"][:10], "machine": data["machine"],
                "command": data["command"] if data["command"].startswith("python") else f"python {data['command']}",
                "note": data.get("note", ""), "result": data}
    return None


def load_records(folder: Path = RESULTS) -> list[dict]:
    records = []
    for path in sorted(folder.glob("*.json")):
        record = as_record(json.loads(path.read_text()))
        if record is None:
            raise SystemExit(f"{path} is not a benchmark record (see results_table.py's docstring)")
        record["file"] = path.name
        records.append(record)
    return records


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(records: list[dict]) -> str:
    """RESULTS.md's text: one table per question, its rows sorted by date."""
    out = ["# Benchmark results", "",
           "Generated by `python benchmarks/results_table.py` from the records in `results/`; do not edit by hand.",
           "Each row is one run: its date, machine and command, and what it answered. Figures from different",
           "machines, or from one machine at different times, are not comparable: see docs/measurement.md.", ""]
    for benchmark, title, how, summary in QUESTIONS:
        rows = []
        for record in sorted((r for r in records if r["benchmark"] == benchmark), key=lambda r: r["date"]):
            if "result" in record:
                cells = summary(record["result"])
            else:   # converted from an older table: its cells, for the benchmark's first question only
                cells = record.get("rows", []) if summary is not scaling_rows else []
            for cells_row in cells:
                rows.append({"date": record["date"], "machine": record["machine"], **cells_row,
                             "command": f"`{record['command']}`", "note": record.get("note", ""),
                             "record": f"[{record['file']}](results/{record['file']})"})
        out += [f"## {title}", "", f"Run: `{how}`", ""]
        if not rows:
            out += ["No recorded run yet.", ""]
            continue
        columns = list(dict.fromkeys(k for row in rows for k in row))
        out += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
        out.append("")
    return "\n".join(out)


def record(benchmark: str, result_path: Path, machine: str, command: str, date: str | None = None,
           note: str = "", folder: Path = RESULTS) -> Path:
    """Wrap a benchmark's own JSON as a record in folder; returns the record's path."""
    if benchmark not in {q[0] for q in QUESTIONS}:
        raise SystemExit(f"unknown benchmark {benchmark!r}; one of {sorted({q[0] for q in QUESTIONS})}")
    date = date or datetime.date.today().isoformat()
    slug = re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-")
    path = folder / f"{benchmark}_{date}_{slug}.json"
    n = 2
    while path.exists():
        path, n = folder / f"{benchmark}_{date}_{slug}_{n}.json", n + 1
    data = {"benchmark": benchmark, "date": date, "machine": machine, "command": command, "note": note,
            "result": json.loads(Path(result_path).read_text())}
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what")
    add = sub.add_parser("record", help="wrap a benchmark's JSON as a record in results/")
    add.add_argument("benchmark")
    add.add_argument("result")
    add.add_argument("--machine", required=True)
    add.add_argument("--command", required=True)
    add.add_argument("--date")
    add.add_argument("--note", default="")
    parser.add_argument("--results", default=str(RESULTS), help=argparse.SUPPRESS)
    parser.add_argument("--table", default=str(TABLE), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.what == "record":
        print(record(args.benchmark, Path(args.result), args.machine, args.command, args.date, args.note,
                     Path(args.results)))
    Path(args.table).write_text(render(load_records(Path(args.results))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
