"""The aitune-ray command's arguments (aitune_ray/command/cli.py runs them). Light on purpose: the package reads
them as it is imported, to say that a job file is not there before anything heavy loads
(aitune_ray/command/early.py)."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    from aitune_ray.version import __version__

    parser = argparse.ArgumentParser(prog="aitune-ray", description="Tune PyTorch modules for inference, "
                                     "building and profiling candidate backends in parallel on Ray.")
    parser.add_argument("--version", action="version", version=f"aitune-ray {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    common.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v: info, -vv: debug)")
    common.add_argument("--log-json", action="store_true", help="logs (stderr) and progress (stdout) as JSON lines")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    tune = commands.add_parser("tune", parents=[common], help="run a tuning job file", description="Run a tuning job: record "
                               "the data, tune the modules, write the checkpoint and the report, check the "
                               "checkpoint loads. Paths in the job file are relative to the current directory.")
    tune.add_argument("job", help="job file (YAML)")
    tune.add_argument("--executor", choices=["auto", "ray", "inline"], help="where builds run (overrides "
                      "executor.type; auto: Ray with GPUs here or a cluster address, else inline)")
    tune.add_argument("--address", help="Ray cluster address (overrides executor.address; default: RAY_ADDRESS, "
                      "else a local Ray on this machine)")
    tune.add_argument("--device", help="auto, cpu, cuda or cuda:N (overrides device)")
    tune.add_argument("--output", help="checkpoint path (overrides output)")
    tune.add_argument("--report", help="markdown report path, with a .json next to it (overrides report)")
    again = tune.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the job's unfinished run folder: run only "
                       "the candidates it has no result for")
    again.add_argument("--fresh", action="store_true", help="remove the job's run folder and start over")
    tune.add_argument("--run-dir", help="the run folder, where each result is written as it finishes "
                      "(default: the checkpoint path with .run appended)")
    add_commands(commands, common)
    return parser


def add_commands(commands, common) -> None:
    """The commands besides tune: report, inspect, doctor."""
    report = commands.add_parser("report", parents=[common], help="render a job's report again from its JSON",
                                 description="Write the Markdown, HTML and PNG report of a job again from its "
                                 "JSON report (RUN.json, written next to the Markdown report).")
    report.add_argument("run", help="a job's JSON report")
    report.add_argument("--out", help="a .md path or a folder (default: next to RUN.json)")
    inspect = commands.add_parser("inspect", parents=[common], help="show what a checkpoint holds",
                                  description="Print a checkpoint's modules, backends and configs, kernel plans, "
                                  "signatures and versions, verifying every part's SHA-256. Loads no model and "
                                  "imports nothing the checkpoint names.")
    inspect.add_argument("checkpoint", help="a .ait file")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    doctor = commands.add_parser("doctor", parents=[common], help="check what this machine or cluster can run",
                                 description="One row per node: Python, torch, CUDA, GPUs, library versions, and "
                                 "which backends and kernel providers can run there. Exit 0 when something can.")
    doctor.add_argument("--address", help="a Ray cluster to check every node of (default: this machine only)")
    doctor.add_argument("--json", action="store_true", help="print the rows as JSON")
