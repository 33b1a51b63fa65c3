"""The aitune-ray command.

    aitune-ray tune JOB.yaml [--executor ray|inline] [--address ADDR] [--device DEV] [--output PATH] [--report PATH]
                             [--resume | --fresh] [--run-dir PATH]
    aitune-ray report RUN.json [--out PATH]      the Markdown, HTML and PNG report again, from a job's JSON
    aitune-ray inspect CHECKPOINT.ait            what a checkpoint holds, its hashes verified, nothing imported
    aitune-ray doctor [--address ADDR]           what this machine (or each node of a cluster) can run

-q (errors only), -v / -vv (library info / debug logs) and --log-json (logs and progress as JSON lines) go
after the command's name.

Made for ``ray job submit --working-dir . -- aitune-ray tune JOB.yaml``. It prints progress and the
summary table, writes the checkpoint and the report, then loads the checkpoint into a fresh model and
compares its outputs with the tuned model's. Exit status: 0 when at least one module was tuned (keeping
eager is a decision too), 1 when every module failed to tune, the checkpoint does not load back or anything
else failed, 2 for a bad job (its file, a factory that raises, an empty or rejected dataset, a device this
machine lacks, an output path that is a folder or cannot be written, a GPU kind no node has, a backend whose
library is missing: aitune_ray/command/checks.py, all before any work), 130 when interrupted (the line says
how to resume); every error is one line on stderr.
A job file of several models runs them as one schedule, with a checkpoint and a report per model (exit 0 when
every model's checkpoint was written and loads back).
Each candidate's result is written to the job's run folder as it finishes; --resume continues a killed run
there, --fresh starts over. This module is the user interface: it prints; the library only logs.
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

from aitune_ray.command.arguments import build_parser
from aitune_ray.errors import AITuneRayError, ConfigError, DatasetError, DeviceError

EXIT_OK, EXIT_FAILED, EXIT_BAD_JOB, EXIT_INTERRUPTED = 0, 1, 2, 130

_print_lock = threading.Lock()
_quiet = False


def say(text: str = "", error: bool = False) -> None:
    """Print text (an error: one line on stderr), its control characters written out (runtime/printable.py):
    names from files or users cannot rewrite the terminal."""
    if _quiet and not error:
        return
    from aitune_ray.runtime.printable import printable

    with _print_lock:
        print(printable(text, lines=not error), file=sys.stderr if error else sys.stdout, flush=True)


# ----- arguments: aitune_ray/command/arguments.py ---------------------------------------------------
def run_command(args: argparse.Namespace) -> int:
    if args.command == "report":
        from aitune_ray.report import render_run_file

        try:
            written = render_run_file(args.run, args.out)
        except ConfigError as exc:
            say(f"error: {exc}", error=True)
            return EXIT_BAD_JOB
        say("report: " + ", ".join(str(p) for p in written.values()))
        return EXIT_OK
    if args.command == "inspect":
        from aitune_ray.checkpoint.inspection import inspect_command

        return inspect_command(args, say)
    if args.command == "doctor":
        return doctor_command(args)
    return tune_command(args)


def doctor_command(args: argparse.Namespace) -> int:
    from aitune_ray.executors import doctor

    if args.address:
        try:
            from aitune_ray.cluster.doctor import cluster_reports
        except ImportError as exc:
            say(f"error: checking a cluster needs Ray ({exc}); install 'aitune-ray[ray]'", error=True)
            return doctor.EXIT_CANNOT_RUN
        rows = cluster_reports(args.address)
    else:
        rows = [doctor.machine_report()]
    say(json.dumps(rows, indent=2, default=str) if args.json else doctor.render(rows))
    return doctor.exit_code(rows)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_JOB
    # Library logs go to stderr (warnings by default, -q fewer, -v more); progress and results go to stdout.
    global _quiet
    from aitune_ray.command.logs import LogSetup

    _quiet = args.quiet
    try:
        with LogSetup(sys.stderr, args.verbose, args.quiet, args.log_json):
            return run_command(args)
    finally:
        _quiet = False


def tune_command(args: argparse.Namespace) -> int:
    # Job files name factories relative to the working directory (what `ray job submit --working-dir` gives);
    # a console script does not put it on sys.path by itself.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from aitune_ray.command.job import load_jobs

    try:
        jobs = load_jobs(args.job)
        for job in jobs:
            apply_overrides(job, args, several=len(jobs) > 1)
    except ConfigError as exc:
        say(f"error: {args.job}: {exc}", error=True)
        return EXIT_BAD_JOB
    held: list = []   # the locks of the outputs and run folders, released when the command ends
    folders: list = []
    try:
        preflight(jobs, args)
        for job in jobs:
            held.append(lock_output(job))
        for job in jobs:
            folders.append(open_run_folder(job, args, several=len(jobs) > 1))
            held.append(folders[-1])
        return run_jobs(jobs, Path(args.job), progress_view(args), folders)
    except KeyboardInterrupt:
        keep = f"; {resume_hint(args)}" if folders else ""
        say(f"error: interrupted; outstanding work was cancelled and no checkpoint was written{keep}", error=True)
        return EXIT_INTERRUPTED
    except (ConfigError, DatasetError, DeviceError) as exc:   # the job's input: its file, model, data, device
        say(f"error: {args.job}: {exc}", error=True)
        return EXIT_BAD_JOB
    except AITuneRayError as exc:
        say(f"error: {type(exc).__name__}: {exc}", error=True)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - one line for the user; the traceback with -vv
        logging.getLogger(__name__).debug("the job failed", exc_info=True)
        say(f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:500]} (-vv shows the traceback)",
            error=True)
        return EXIT_FAILED
    finally:
        for lock in held:
            lock.close()


def lock_output(job):
    """The lock of the job's checkpoint path (.NAME.lock beside it), held while the command runs: two runs never
    write one output (a second is refused, naming the first)."""
    from aitune_ray.executors.run_lock import Lock

    return Lock.beside(job.output, f"output {job.output}")


def preflight(jobs: list, args: argparse.Namespace) -> None:
    """Every check that can be made before the work, in order (aitune_ray/command/checks.py): the paths, the GPU
    kind, the extras. A mistake is a ConfigError or a DeviceError: one line, exit 2."""
    from aitune_ray.command import checks

    several = len(jobs) > 1
    for job in jobs:
        checks.check_paths(job, args.run_dir, args.resume, several, Path(args.job).stem)
    for kind in dict.fromkeys(job.executor.gpu_kind for job in jobs):
        checks.check_gpu_kind(next(job for job in jobs if job.executor.gpu_kind == kind))
    for job in jobs:
        checks.check_extras(job)


def resume_hint(args: argparse.Namespace) -> str:
    """The command that continues an interrupted run where it stopped."""
    words = ["aitune-ray", "tune", args.job]
    for option in ("output", "report", "run_dir", "executor", "address", "device"):
        value = getattr(args, option, None)
        if value:
            words += [f"--{option.replace('_', '-')}", value]
    return "run " + " ".join(_quoted(w) for w in words + ["--resume"]) + " to continue where it stopped"


def _quoted(word: str) -> str:
    import shlex

    return shlex.quote(str(word))


def apply_overrides(job, args: argparse.Namespace, several: bool = False) -> None:
    from aitune_ray.command.job import DEVICE_PATTERN

    for option in ("output", "report"):
        if several and getattr(args, option):
            raise ConfigError(f"--{option}: the job has several models; set {option} in each entry of models")
    if args.executor:
        job.executor.type = args.executor
    if args.address:
        if job.executor.type == "inline":
            raise ConfigError("--address: an address needs the ray executor, not inline")
        job.executor.address = args.address
    if args.device:
        if not DEVICE_PATTERN.match(args.device):
            raise ConfigError(f"--device: expected auto, cpu, cuda or cuda:N, got {args.device!r}")
        job.device = args.device
    if args.output:
        job.output = os.path.expanduser(args.output)
    if args.report:
        job.report = os.path.expanduser(args.report)


def open_run_folder(job, args: argparse.Namespace, several: bool = False):
    """The model's run folder, checked against its job (its content, not the output paths or the executor).
    In a job of several models each has its own: --run-dir is then their parent folder."""
    import hashlib

    from aitune_ray.executors.run_dir import RunFolder

    what = {k: v for k, v in dataclasses.asdict(job).items() if k not in ("output", "report", "executor")}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    from aitune_ray.command.checks import run_folder_path

    path = run_folder_path(job, args.run_dir, several)
    folder = RunFolder.open(path, {"job": digest}, mode="resume" if args.resume else "fresh" if args.fresh else "new")
    done = folder.results_count()
    say(f"run folder: {path}" + (f" ({done} candidate result(s) from the earlier run)" if done else ""))
    return folder


# ----- the run ---------------------------------------------------------------------------------------
def progress_view(args: argparse.Namespace):
    from aitune_ray.command.progress import ProgressView

    return ProgressView(sys.stdout, json_lines=args.log_json, enabled=not args.quiet)


def run_job(job, job_path: Path, view=None, folder=None) -> int:
    """Run a job of one model (see run_jobs)."""
    return run_jobs([job], job_path, view, [folder])


def run_jobs(jobs: list, job_path: Path, view=None, folders: list | None = None) -> int:
    """Run the models of a job file as one schedule: each model is built and records its data, then every
    wrapped module of every model is tuned at once on one executor; each model then gets its checkpoint and
    report. A job for several GPU kinds runs so once per kind, on an executor targeting that kind (its own
    decisions, its own checkpoints). Exit status: 0 when every model wrote a checkpoint that loads back,
    else 1."""
    import contextlib

    from aitune_ray.report import EventRecorder

    recorder = EventRecorder(view)
    folders = folders or [None] * len(jobs)
    kinds: dict = {}   # a job of several GPU kinds (executor.gpu_kinds): one run per kind, one after another
    for job, folder in zip(jobs, folders):
        kinds.setdefault(job.executor.gpu_kind, []).append((job, folder))
    with view if view is not None else contextlib.nullcontext():
        codes = [_run_jobs([j for j, _ in group], job_path, recorder, [f for _, f in group])
                 for group in kinds.values()]
    return EXIT_OK if all(code == EXIT_OK for code in codes) else EXIT_FAILED


@dataclasses.dataclass
class _Model:
    """One model of a job while it runs."""

    job: Any
    folder: Any
    root: Any = None
    modules: dict = dataclasses.field(default_factory=dict)   # name -> wrapped Module
    executor: Any = None                                      # the job's executor (journaled into folder)


def _run_jobs(jobs: list, job_path: Path, recorder, folders: list) -> int:
    import torch

    from aitune_ray.api.tuning import run_modules

    executor = make_executor(jobs[0], recorder)   # the executor and device are the job's, shared by its models
    started = time.perf_counter()
    models = [_Model(job, folder) for job, folder in zip(jobs, folders)]
    codes = []
    try:
        executor.open()
        # The device to tune for: on Ray, judged by the cluster's GPUs, not this machine's.
        device = executor.resolve_device(None if jobs[0].device == "auto" else jobs[0].device)
        # Recording runs here, on the device when this machine has it, else on its CPU.
        local = device if device.type == "cpu" or torch.cuda.is_available() else torch.device("cpu")
        work = []
        for model in models:
            work += _prepare(model, executor, device, local, several=len(models) > 1)
        outcomes = run_modules(work, executor)
        tuned_s = time.perf_counter() - started
        for model in models:
            mine = [o for o in outcomes if o[0].name in model.modules]
            codes.append(_finish(model, mine, job_path, device, local, tuned_s, recorder, several=len(models) > 1))
    finally:
        executor.close()
    return EXIT_OK if codes and all(c == EXIT_OK for c in codes) else EXIT_FAILED


def _prepare(model: _Model, executor, device, local, several: bool) -> list[tuple]:
    """Build the model, wrap its modules, record its data: (module, device, executor) to tune."""
    from aitune_ray.command.job import move_to, wrap_modules
    from aitune_ray.api.tuning import serving_context
    from aitune_ray.executors.run_dir import journaled
    from aitune_ray.api.tuning import _calls_as_given, _record, _unique_names

    job = model.job
    model.root, model.modules = wrap_modules(job.make_model(), job.module_specs(), lambda: job.make_strategy(device))
    move_to(model.root, local)
    if several:   # module names key the shared executor's work: the model's name tells apart those that clash
        for module in model.modules.values():
            module.name = f"{job.name}.{module.name}"
        model.modules = {m.name: m for m in model.modules.values()}
    strategy = next(iter(model.modules.values())).strategy
    say(f"aitune-ray: tuning {(job.name + ': ') if several else ''}{', '.join(model.modules)} for {device} with "
        f"{strategy.name} over {', '.join(b.describe() for b in strategy.backends)} ({job.executor.type} executor)")
    model.executor = journaled(executor, model.folder) if model.folder is not None else executor
    reached = _record(model.root, _calls_as_given(model.root, on_device(job.make_data(), local)))
    _unique_names(reached)
    serving = serving_context(job.serving_threads)
    for module in reached:
        module.serving = serving
    return [(module, device, model.executor) for module in reached]


def _finish(model: _Model, outcomes: list, job_path: Path, device, local, tuned_s: float, recorder,
            several: bool) -> int:
    """One model's report, checkpoint and its check."""
    from aitune_ray.checkpoint.own import OwnCheckpoint
    from aitune_ray.api.tuning import serving_context
    from aitune_ray.report import summary
    from aitune_ray.report.fitness import host_state
    from aitune_ray.api.tuning import collect_reports

    job, root, check = model.job, model.root, {}
    report = collect_reports(outcomes)
    events = [e for e in recorder.events if e.get("module") in model.modules] if several else recorder.events
    prefix = f"{job.name}: " if several else ""
    say()
    say(summary(report, host_state()))   # the answer first: what to deploy, how much faster
    decided = [m.module for m in report.modules if m.module not in report.failures]
    for name in model.modules:
        if name not in decided and name not in report.failures:
            say(f"note: {name} was never called by the dataset; it stays eager")
    say(f"{prefix}tuned in {tuned_s:.1f} s: {len(decided)} of {len(model.modules)} module(s) decided"
        + (f", {len(report.failures)} failed" if report.failures else ""))
    if not decided:
        say(f"error: {prefix}no module could be tuned; no checkpoint written", error=True)
        write_report(job, job_path, device, report, tuned_s, check, events)
        return EXIT_FAILED
    output = OwnCheckpoint(job.output)
    output.path.parent.mkdir(parents=True, exist_ok=True)
    output.save(root)
    say(f"{prefix}checkpoint: {output.path}")
    if model.folder is not None:
        model.folder.mark_complete()
    if device != local:
        check = {"passed": True, "skipped": f"tuned for {device}, and this machine has no CUDA GPU to "
                                            "load the checkpoint on"}
        say(f"checkpoint check skipped: {check['skipped']}")
    else:
        check = check_checkpoint(job, root, output, local)
        if check.get("passed"):
            check["deployed"] = check_loaded_speed(job, root, output, local, serving_context(job.serving_threads))
    write_report(job, job_path, device, report, tuned_s, check, events)
    return EXIT_OK if check.get("passed") else EXIT_FAILED


def on_device(dataset, device):
    """Yield dataset items with their tensors moved to device."""
    import torch

    from aitune_ray.model.samples import move

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


def check_checkpoint(job, root, output, device) -> dict:
    """Load the checkpoint into a fresh model and compare its outputs with the tuned model's on one item."""
    import torch

    from aitune_ray.command.job import move_to, wrap_modules
    from aitune_ray.measure.correctness import compare_outputs
    from aitune_ray.model.samples import tensors_of

    try:
        fresh, _ = wrap_modules(job.make_model(), job.module_specs())
        move_to(fresh, device)
        with output.load(fresh) as fresh:   # the file this run has just written, as it wrote it
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


def check_loaded_speed(job, root, output, device, serving=None) -> dict:
    """Each module, loaded from the checkpoint as a user loads it, timed against eager in paired rounds on its
    recorded samples in the serving context: its speedup as loaded, judged against the decision's own interval
    (aitune_ray.decision.agreement; information only: the tuning decided)."""
    from aitune_ray.command.job import move_to, wrap_modules

    fresh, _ = wrap_modules(job.make_model(), job.module_specs())
    move_to(fresh, device)
    with output.load(fresh) as fresh:   # the file this run has just written, as it wrote it
        return _time_loaded(root, fresh, device, serving)


def _time_loaded(root, fresh, device, serving=None) -> dict:
    from aitune_ray.measure.conditions import CUPTI_NOTE, cupti_attached
    from aitune_ray.api.module import find_modules
    from aitune_ray.measure.request import TimingRequest
    from aitune_ray.tune_strategy.deploy import judged_check, time_deployed

    tuned, results = find_modules(root), {}
    for path, loaded in find_modules(fresh).items():
        original = tuned.get(path)
        if loaded.backend is None or original is None or not len(original.samples):
            continue
        strategy = original.strategy
        rounds = getattr(strategy, "deploy_check_rounds", 0)
        if rounds <= 0 or not strategy.performance_validation:
            continue
        try:
            request = TimingRequest.paired("loaded", device, serving, rounds, strategy.measure_config)
            timed, checked_in = time_deployed(loaded, loaded.eager_call, original.samples.to(device), request, strategy)
        except Exception as exc:  # the timing's own failure is reported; the checkpoint stays as it is
            results[original.name] = {"backend": loaded.backend.name, "verdict": "check failed",
                                      "reason": f"{type(exc).__name__}: {exc}"}
            say(f"warning: timing {original.name} as loaded failed: {type(exc).__name__}: {exc}", error=True)
            continue
        report = original.report
        judged = judged_check(report, report.chosen if report is not None else "", timed, checked_in,
                              strategy.noise_tolerance)
        results[original.name] = {"backend": loaded.backend.name, "verdict": timed.kind, **judged}
        if cupti_attached():
            results[original.name]["note"] = CUPTI_NOTE
        note = results[original.name].get("note")
        say(f"{original.name} as loaded, over the recorded mix: {judged['reason']}" + (f" ({note})" if note else ""),
            error=judged["agreement"] not in ("agrees", "no decision figure"))
    return results


def write_report(job, job_path: Path, device, report, elapsed_s: float, check: dict, events=()) -> None:
    """The job's report files: Markdown, HTML, PNGs and the JSON they are rendered from (aitune_ray.report),
    at the job's report path, else next to its checkpoint."""
    from aitune_ray.report import write_reports
    from aitune_ray.report.fitness import host_state

    data = {"job_path": str(job_path), "job": dataclasses.asdict(job), "host": platform.node(),
            "device": str(device), "elapsed_s": elapsed_s, "checkpoint": str(job.output) if check else None,
            "checkpoint_check": check, "report": report.to_dict(), "events": list(events), "host_state": host_state()}
    written = write_reports(data, job.report or Path(job.output).with_suffix(".md"))
    say(f"report: {written['md']}, {written['html']} and {written['json']}")


# ----- executors and progress ------------------------------------------------------------------------
def make_executor(job, progress=None):
    """The job's executor, reporting progress to progress(event); an "auto" type is decided here (the rule:
    aitune_ray/executors/choice.py), said in one line, and recorded in the job. The inline path never imports Ray."""
    from aitune_ray.executors.choice import choose_executor

    choice = choose_executor(job.executor.type, job.executor.address, job.device)
    say(choice.line())
    job.executor.type = choice.kind
    if job.executor.type == "inline":
        from aitune_ray.executors.inline import InlineExecutor

        return InlineExecutor(progress=progress, contain=job.executor.contain,
                              task_timeout_s=job.executor.task_timeout_s,
                              remeasure_rounds=job.executor.remeasure_rounds)
    try:
        from aitune_ray.cluster.ray_executor import RayExecutor
    except ImportError as exc:
        raise AITuneRayError(f"the ray executor is not available here ({exc}); install 'aitune-ray[ray]' "
                             "or run with --executor inline") from exc
    return RayExecutor(job.executor.address, progress=progress, **job.executor.ray_options())


if __name__ == "__main__":
    sys.exit(main())
