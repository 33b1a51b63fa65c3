"""A job's report files: Markdown and self-contained HTML, with a throughput plot and the schedule's timeline.

    write_reports(run, "out/job.md")   # out/job.md, out/job.html, out/job.json, out/job-speedup.png, ...
    render_run_file("out/job.json")     # the same files again from a job's JSON report

run is the job's JSON report as a dict: job, host, device, elapsed_s, checkpoint, checkpoint_check,
report (TuningReport.to_dict()), events (what an EventRecorder kept; see aitune_ray.report.events) and
host_state (aitune_ray.report.fitness.host_state()). Worker logs a result names are copied beside the report
(out/job-logs/) and linked there; a log already gone is linked nowhere.

summary(report) is the short form of a TuningReport, the answer first, that the CLI prints.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from aitune_ray.errors import ConfigError
from aitune_ray.runtime import files
from aitune_ray.report.events import EventRecorder, Span, spans

logger = logging.getLogger(__name__)

MAX_RUN_BYTES = 64 << 20   # a job's JSON report is a few hundred KB; a file far larger is not one

__all__ = ["EventRecorder", "Span", "render_run_file", "report_paths", "spans", "summary", "write_reports"]


def report_paths(path: str | Path) -> dict[str, Path]:
    """Where each file of a report goes, from the Markdown (or JSON) path a job names."""
    path = Path(path)
    md = path.with_suffix(".md") if path.suffix in (".json", ".html") else path
    stem = md.with_suffix("")
    return {"md": md, "html": md.with_suffix(".html"), "json": md.with_suffix(".json"),
            "speedup": stem.parent / f"{stem.name}-speedup.png",
            "timeline": stem.parent / f"{stem.name}-timeline.png", "logs": stem.parent / f"{stem.name}-logs"}


def write_reports(run: dict, path: str | Path, write_json: bool = True, base: str | Path | None = None,
                  confine: bool = False) -> dict[str, Path]:
    """Write the report files of one job; returns the paths written, by kind. base: where relative log paths
    in run are found (the folder of the JSON it was read from; default: the report's folder). confine: run was
    read from a file (it may be anyone's): only logs inside base are copied (report/logs.py). Everything is
    rendered before anything is written; each file is written by renaming a new file over it (a symlink
    planted at a report path is replaced, never followed)."""
    from aitune_ray.report import html, markdown
    from aitune_ray.report.document import blocks, images
    from aitune_ray.report.logs import keep_logs

    paths = report_paths(path)
    paths["md"].parent.mkdir(parents=True, exist_ok=True)
    run = keep_logs(run, paths["logs"], Path(base) if base is not None else paths["md"].parent, confine)
    content = blocks(run)
    pictures = images(run)
    links = {name: paths[name].name for name, data in pictures.items() if data}
    texts = {"md": markdown.render(content, links), "html": html.render(content, pictures)}
    written: dict[str, Path] = {}
    if write_json:
        written["json"] = files.write_atomic(paths["json"], json.dumps(run, indent=2, default=str) + "\n")
    for name, data in pictures.items():
        if data:
            written[name] = files.write_atomic(paths[name], data)
        elif os.path.lexists(paths[name]):   # a stale picture of an earlier run would contradict this report
            paths[name].unlink()
    for name, text in texts.items():
        written[name] = files.write_atomic(paths[name], text)
    logger.info("report written: %s", ", ".join(str(p) for p in written.values()))
    return written


def render_run_file(json_path: str | Path, out: str | Path | None = None) -> dict[str, Path]:
    """Render a job's JSON report again: Markdown, HTML and PNGs next to it (or at out, a .md path or a folder).
    Whatever is wrong with the file (not a regular file, not JSON, a field of another type or missing) is a
    one-line ConfigError, and then no report file is written."""
    json_path = Path(json_path)
    try:
        text = files.read_regular(json_path, MAX_RUN_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {json_path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{json_path} is not JSON: {exc}") from exc
    try:
        run = json.loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ConfigError(f"{json_path} is not JSON: {' '.join(str(exc).split())[:200] or 'too large to parse'}") \
            from exc
    if not isinstance(run, dict) or not isinstance(run.get("report"), dict):
        raise ConfigError(f"{json_path} is not a job's JSON report (it has no 'report' mapping)")
    target = Path(out) if out else json_path.with_suffix(".md")
    if out and (target.is_dir() or not target.suffix):
        target = target / json_path.with_suffix(".md").name
    try:
        return write_reports(run, target, write_json=target.with_suffix(".json").resolve() != json_path.resolve(),
                             base=json_path.parent, confine=True)
    except ConfigError:
        raise
    except OSError as exc:
        raise ConfigError(f"cannot write the report {target}: {exc.strerror or exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a record of a shape this version does not render: one line
        logger.debug("rendering %s failed", json_path, exc_info=True)
        raise ConfigError(f"{json_path} is not a job's JSON report that this version renders (a field is missing "
                          f"or of another type): {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from exc


def summary(report, host_state: dict | None = None) -> str:
    """The short Markdown of a TuningReport (or its to_dict()): the answer per module, the host's fitness,
    each module's candidates and the decision's reasons. (TuningReport.markdown() gives every figure.)
    host_state: what the process had to measure with (fitness.host_state()), named where the host was unfit."""
    from aitune_ray.report import markdown
    from aitune_ray.report.document import blocks

    data = report if isinstance(report, dict) else report.to_dict()
    return markdown.render(blocks({"report": data, "host_state": host_state}, brief=True))
