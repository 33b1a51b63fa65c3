"""The aitune-ray command.

    aitune-ray tune JOB.yaml [--executor ray|inline] [--address ADDR] [--device DEV] [--output PATH] [--report PATH]

Made for ``ray job submit --working-dir . -- aitune-ray tune JOB.yaml``. It prints progress and the
summary table, writes the checkpoint and the report, then loads the checkpoint into a fresh model and
compares its outputs with the tuned model's. Exit status: 0 when at least one module was tuned (keeping
eager is a decision too), 1 when every module failed to tune or the checkpoint does not load back, 2 for a
bad job file. This module is the user interface: it prints; the library only logs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from aitune_ray.errors import AITuneRayError, ConfigError

EXIT_OK, EXIT_FAILED, EXIT_BAD_JOB = 0, 1, 2

_print_lock = threading.Lock()


def say(text: str = "", error: bool = False) -> None:
    with _print_lock:
        print(text, file=sys.stderr if error else sys.stdout, flush=True)


# ----- arguments -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from aitune_ray import __version__

    parser = argparse.ArgumentParser(prog="aitune-ray", description="Tune PyTorch modules for inference, "
                                     "building and profiling candidate backends in parallel on Ray.")
    parser.add_argument("--version", action="version", version=f"aitune-ray {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    tune = commands.add_parser("tune", help="run a tuning job file", description="Run a tuning job: record "
                               "the data, tune the modules, write the checkpoint and the report, check the "
                               "checkpoint loads. Paths in the job file are relative to the current directory.")
    tune.add_argument("job", help="job file (YAML)")
    tune.add_argument("--executor", choices=["ray", "inline"], help="where builds run (overrides executor.type)")
    tune.add_argument("--address", help="Ray cluster address (overrides executor.address; default: RAY_ADDRESS, "
                      "else a local Ray on this machine)")
    tune.add_argument("--device", help="auto, cpu, cuda or cuda:N (overrides device)")
    tune.add_argument("--output", help="checkpoint path (overrides output)")
    tune.add_argument("--report", help="markdown report path, with a .json next to it (overrides report)")
    tune.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v: info, -vv: debug)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_JOB
    # Library logs go to stderr (warnings by default, -v for more); progress and results go to stdout.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel({0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG))
    try:
        return tune_command(args)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def tune_command(args: argparse.Namespace) -> int:
    # Job files name factories relative to the working directory (what `ray job submit --working-dir` gives);
    # a console script does not put it on sys.path by itself.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from aitune_ray.job import load_job

    try:
        job = load_job(args.job)
        apply_overrides(job, args)
    except ConfigError as exc:
        say(f"error: {args.job}: {exc}", error=True)
        return EXIT_BAD_JOB
    try:
        return run_job(job, Path(args.job))
    except ConfigError as exc:
        say(f"error: {args.job}: {exc}", error=True)
        return EXIT_BAD_JOB
    except AITuneRayError as exc:
        say(f"error: {type(exc).__name__}: {exc}", error=True)
        return EXIT_FAILED


def apply_overrides(job, args: argparse.Namespace) -> None:
    from aitune_ray.job import DEVICE_PATTERN

    if args.executor:
        job.executor.type = args.executor
    if args.address:
        if job.executor.type != "ray":
            raise ConfigError("--address: an address needs the ray executor, not inline")
        job.executor.address = args.address
    if args.device:
        if not DEVICE_PATTERN.match(args.device):
            raise ConfigError(f"--device: expected auto, cpu, cuda or cuda:N, got {args.device!r}")
        job.device = args.device
    if args.output:
        job.output = args.output
    if args.report:
        job.report = args.report


# ----- the run ---------------------------------------------------------------------------------------
def run_job(job, job_path: Path) -> int:
    import torch

    import aitune_ray as ait
    from aitune_ray.job import move_to, wrap_modules

    executor = make_executor(job)
    started = time.perf_counter()
    check: dict[str, Any] = {}
    try:
        executor.open()
        # The device to tune for: on Ray, judged by the cluster's GPUs, not this machine's.
        device = executor.resolve_device(None if job.device == "auto" else job.device)
        # Recording runs here, on the device when this machine has it, else on its CPU.
        local = device if device.type == "cpu" or torch.cuda.is_available() else torch.device("cpu")
        model = job.make_model()
        root, modules = wrap_modules(model, job.module_specs(), lambda: job.make_strategy(device))
        move_to(root, local)
        strategy = next(iter(modules.values())).strategy
        say(f"aitune-ray: tuning {', '.join(modules)} for {device} with {strategy.name} over "
            f"{', '.join(b.describe() for b in strategy.backends)} ({job.executor.type} executor)")

        report = ait.tune(root, on_device(job.make_data(), local), device=device, executor=executor)
        tuned_s = time.perf_counter() - started
        say()
        say(report.markdown())
        decided = [m.module for m in report.modules if m.module not in report.failures]
        for name in modules:
            if name not in decided and name not in report.failures:
                say(f"note: {name} was never called by the dataset; it stays eager")
        say(f"tuned in {tuned_s:.1f} s: {len(decided)} of {len(modules)} module(s) decided"
            + (f", {len(report.failures)} failed" if report.failures else ""))
        if not decided:
            say("error: no module could be tuned; no checkpoint written", error=True)
            write_report(job, job_path, device, report, tuned_s, check)
            return EXIT_FAILED
        output = Path(job.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        ait.save(root, output)
        say(f"checkpoint: {output}")
        if device != local:
            check = {"passed": True, "skipped": f"tuned for {device}, and this machine has no CUDA GPU to "
                                                "load the checkpoint on"}
            say(f"checkpoint check skipped: {check['skipped']}")
        else:
            check = check_checkpoint(job, root, output, local)
    finally:
        executor.close()
    write_report(job, job_path, device, report, time.perf_counter() - started, check)
    return EXIT_OK if check.get("passed") else EXIT_FAILED


def on_device(dataset, device):
    """Yield dataset items with their tensors moved to device."""
    import torch

    from aitune_ray.samples import move

    if isinstance(dataset, torch.Tensor):
        dataset = [dataset]
    for item in dataset:
        yield move(item, device)


def call_with(func, item):
    if isinstance(item, tuple):
        return func(*item)
    if isinstance(item, dict):
        return func(**item)
    return func(item)


def check_checkpoint(job, root, output: Path, device) -> dict:
    """Load the checkpoint into a fresh model and compare its outputs with the tuned model's on one item."""
    import torch

    import aitune_ray as ait
    from aitune_ray.job import move_to, wrap_modules
    from aitune_ray.measure.correctness import compare_outputs
    from aitune_ray.samples import tensors_of

    try:
        fresh, _ = wrap_modules(job.make_model(), job.module_specs())
        move_to(fresh, device)
        fresh = ait.load(fresh, output)
        item = next(iter(on_device(job.make_data(), device)))
        with torch.no_grad():
            expected = call_with(root, item)
            got = call_with(fresh, item)
    except Exception as exc:  # any failure to load or call it is this check's result
        say(f"error: the checkpoint does not load back: {type(exc).__name__}: {exc}", error=True)
        return {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
    diffs = [float((a.detach().float() - b.detach().float()).abs().max()) if a.shape == b.shape and a.numel()
             else (0.0 if a.shape == b.shape else math.inf)
             for a, b in zip(tensors_of(got), tensors_of(expected))]
    max_abs = max(diffs, default=0.0)
    verdict = compare_outputs([(got, expected)])
    outcome = "matches" if verdict.passed else "DIFFERS: " + verdict.reason
    say(f"checkpoint check: loaded into a fresh model; max abs difference from the tuned model on one item: "
        f"{max_abs:.3g} ({outcome})", error=not verdict.passed)
    return {"passed": verdict.passed, "max_abs_diff": max_abs, "relative_l2": verdict.max_error,
            "reason": verdict.reason}


def write_report(job, job_path: Path, device, report, elapsed_s: float, check: dict) -> None:
    if not job.report:
        return
    path = Path(job.report)
    md_path = path.with_suffix(".md") if path.suffix == ".json" else path
    json_path = md_path.with_suffix(".json")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# aitune-ray report: {job_path}", "",
             f"- host: {platform.node()}", f"- device: {device}", f"- executor: {job.executor.type}",
             f"- checkpoint: {job.output if check else '(none)'}", f"- elapsed: {elapsed_s:.1f} s"]
    if "max_abs_diff" in check:
        lines.append(f"- checkpoint check: max abs difference {check['max_abs_diff']:.3g}, "
                     f"{'matches' if check['passed'] else 'differs'}")
    elif check:
        lines.append(f"- checkpoint check: {check.get('error') or check.get('skipped')}")
    md_path.write_text("\n".join(lines) + "\n\n" + report.markdown())
    data = {"job": dataclasses.asdict(job), "host": platform.node(), "device": str(device),
            "elapsed_s": elapsed_s, "checkpoint": str(job.output) if check else None, "checkpoint_check": check,
            "report": report.to_dict()}
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    say(f"report: {md_path} and {json_path}")


# ----- executors and progress ------------------------------------------------------------------------
def make_executor(job):
    """The job's executor, printing progress. The inline path never imports Ray."""
    if job.executor.type == "inline":
        from aitune_ray.inline import InlineExecutor

        return InlineExecutor(progress=print_progress)
    try:
        from aitune_ray.cluster.ray_executor import RayExecutor
    except ImportError as exc:
        raise AITuneRayError(f"the ray executor is not available here ({exc}); install 'aitune-ray[ray]' "
                             "or run with --executor inline") from exc
    return RayExecutor(job.executor.address, progress=print_progress, **job.executor.ray_options())


def print_progress(event: dict) -> None:
    """A line for a module's eager baseline, for each build's start and for each build's end (progress
    events of aitune_ray.executor; the others are left to the log)."""
    where = ", ".join(str(event[k]) for k in ("node", "gpu") if event.get(k))
    where = f" on {where}" if where else ""
    module, backend = event.get("module", "?"), event.get("backend") or event.get("key", "?")
    kind, task = event.get("event"), event.get("task", "build")
    if task == "baseline" and kind == "measuring":
        say(f"[{module}] measuring eager{where}: {event.get('samples', '?')} samples, "
            f"batch sizes {event.get('batch_sizes', '?')}")
        return
    if task != "build" or kind not in ("building", "done"):
        return
    if kind == "building":
        say(f"[{module}] building  {backend}{where}")
        return
    status = event.get("status", "?")
    word = {"ok": "done    ", "cancelled": "stopped "}.get(status, "FAILED  ")
    elapsed = event.get("elapsed_s")
    took = f" after {elapsed:.1f} s" if isinstance(elapsed, (int, float)) else ""
    say(f"[{module}] {word}{backend}: {status}{took}{where}")


if __name__ == "__main__":
    sys.exit(main())
