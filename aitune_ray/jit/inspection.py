"""INSPECT mode's report: every tracked module's calls, time, parameters and input signatures, as JSON or as
an HTML page (every string escaped)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from aitune_ray.jit import registry
from aitune_ray.runtime.files import write_atomic


def inspection_report() -> list[dict]:
    """One entry per tracked module that was called, top modules first, each followed by its children."""
    found: list[dict] = []

    def walk(module) -> None:
        found.append(module.describe())
        for child in module.children:
            walk(child)

    for head in registry.heads:
        walk(head)
    return found


def save_report(path: Path | str, model_name: str = "Model") -> Path:
    """Write the report: JSON when path ends in .json, else an HTML page."""
    path = Path(path)
    entries = inspection_report()
    if path.suffix == ".json":
        return write_atomic(path, json.dumps({"model": model_name, "modules": entries}, indent=1))
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(str(value))}</td>" for value in (
            "· " * e["level"] + e["module"], e["class"], e["calls"], e["parameters"],
            f"{e['seconds']:.6f}", json.dumps(e["inputs"])[:2000])) + "</tr>" for e in entries)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(model_name)}</title></head>"
            f"<body><h1>{html.escape(model_name)}: JIT inspection</h1><table border='1'>"
            "<tr><th>module</th><th>class</th><th>calls</th><th>parameters</th><th>seconds</th><th>inputs</th>"
            f"</tr>\n{rows}\n</table></body></html>\n")
    return write_atomic(path, page)
