"""A PerformanceProfile's data as Markdown: the settings, each measured run, the regions, each run's
attribution, the profiler's key averages and the warnings. Times in milliseconds, shares in percent."""

from __future__ import annotations

import statistics
from typing import Any

from aitune_ray.runtime.printable import markdown_text


def render(data: dict[str, Any]) -> str:
    parts = [_overview(data), _runs(data), _regions(data), _attribution(data), _averages(data), _warnings(data)]
    # module and function names are the user's: printable, never HTML or a link
    return markdown_text("\n\n".join(part for part in parts if part) + "\n", lines=True)


def _overview(data: dict[str, Any]) -> str:
    config, given = data["config"], data["input"]
    rows = [["Created", f"`{data['created_at']}`"],
            ["Version", f"`{data['aitune_version']}`"],
            ["Target", f"`{data['target']['type']}`"],
            ["Warmup runs", str(config["warmup_runs"])],
            ["Measured runs", str(config["measured_runs"])],
            ["Inference function", "yes" if config["uses_inference_function"] else "no"],
            ["Positional inputs", str(given["args_count"])],
            ["Keyword inputs", ", ".join(f"`{k}`" for k in given["kwargs"]) or "-"]]
    walls = [run["timing"]["wall_time_us"] for run in data["runs"]]
    if walls:
        rows.append(["Wall time per run (median, min, max)",
                     ", ".join(_ms(v) for v in (statistics.median(walls), min(walls), max(walls)))])
    return "# Performance Profile\n\n" + _table(["Field", "Value"], rows)


def _runs(data: dict[str, Any]) -> str:
    rows = [[str(run["run_index"]), _ms(run["timing"].get("wall_time_us")), _ms(run["timing"].get("cpu_time_us")),
             _ms(run["timing"].get("device_time_us"))] for run in data["runs"]]
    return "## Runs\n\n" + _table(["Run", "Wall", "CPU", "Device"], rows)


def _regions(data: dict[str, Any]) -> str:
    if not data["regions"]:
        return "## Regions\n\nNo module region ran."
    rows = [[f"`{r['id']}`", r["name"], r["kind"], r.get("wrapper_state", "-"), f"`{r['module_type']}`"]
            for r in data["regions"]]
    return "## Regions\n\n" + _table(["Region", "Name", "Kind", "State", "Module type"], rows)


def _attribution(data: dict[str, Any]) -> str:
    rows = []
    for run in data["runs"]:
        index = str(run["run_index"])
        for r in run["regions"]:
            rows.append([index, f"`{r['region_id']}`", str(r["calls"]), _ms(r.get("cpu_time_us")),
                         _share(r.get("cpu_time_fraction")), _ms(r.get("device_time_us")),
                         _share(r.get("device_time_fraction"))])
        rest = run["residual"]
        rows.append([index, "_(residual)_", "—", _ms(rest.get("cpu_time_us")), _share(rest.get("cpu_time_fraction")),
                     _ms(rest.get("device_time_us")), _share(rest.get("device_time_fraction"))])
    if not rows:
        return ""
    return "## Per-Run Attribution\n\n" + _table(
        ["Run", "Region", "Calls", "CPU", "CPU Fraction", "Device", "Device Fraction"], rows)


def _averages(data: dict[str, Any]) -> str:
    views = data["profiler"]["key_averages"]
    parts = ["## Profiler key averages"]
    for sort_by, title in (("cpu_time_total", "By CPU total"), ("device_time_total", "By device total")):
        if sort_by in views:
            rows = [[f"`{e['key']}`", e["device_type"], str(e["count"]), _ms(e.get("self_cpu_time_total_us")),
                     _ms(e.get("cpu_time_total_us")), _ms(e.get("self_device_time_total_us")),
                     _ms(e.get("device_time_total_us"))] for e in views[sort_by]["events"]]
            parts.append(f"### {title} (top {views[sort_by]['row_limit']})\n\n" + _table(
                ["Name", "Device", "Count", "Self CPU", "CPU total", "Self device", "Device total"], rows))
    return "\n\n".join(parts)


def _warnings(data: dict[str, Any]) -> str:
    if not data["warnings"]:
        return "## Warnings\n\nNo warnings."
    rows = [[w["code"], w["source"], w["message"]] for w in data["warnings"]]
    return "## Warnings\n\n" + _table(["Code", "Source", "Message"], rows)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers))] + [line(row) for row in rows])


def _ms(us: Any) -> str:
    return "-" if us is None else f"{float(us) / 1e3:.3f} ms"


def _share(fraction: Any) -> str:
    return "-" if fraction is None else f"{float(fraction) * 100:.1f}%"
