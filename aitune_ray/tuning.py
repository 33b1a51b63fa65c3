"""tune() and tune_modules(): record, then tune each wrapped module (save() and load() live in checkpoint)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import logging
import os
import shutil
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from aitune_ray.executor import Executor, TuneContext
from aitune_ray.device import resolve_device
from aitune_ray.errors import AITuneRayError, DatasetError, RecordingError, RunFolderError
from aitune_ray.recording import ModuleState, recording_session
from aitune_ray.tune_strategy.deploy import deploy_checked
from aitune_ray.tune_strategy.report import ModuleReport, TuningReport

logger = logging.getLogger(__name__)

# A "module" here is an aitune_ray.Module; this file does not import module.py, which imports it (Module.tune).

_DRIVER_TIMING = threading.Lock()   # no two modules' timings on the driver's device at once


def default_strategy(device: torch.device):
    """MaxThroughput over the backends that need nothing beyond the core install on this device."""
    from aitune_ray.backend import ONNXRuntimeBackend, TorchInductorJitBackend
    from aitune_ray.tune_strategy import MaxThroughputStrategy

    backends = [TorchInductorJitBackend()]
    try:
        import onnxruntime  # noqa: F401

        if device.type == "cpu":
            backends.append(ONNXRuntimeBackend())
    except ImportError:
        pass
    return MaxThroughputStrategy(backends)


@contextlib.contextmanager
def _opened(executor: Executor | None, device=None) -> Iterator[Executor]:
    """executor, opened; None: the default executor for device, which is also closed at the end."""
    own = executor is None
    executor = executor or default_executor(device)
    try:
        executor.open()
        yield executor
    finally:
        if own:
            executor.close()


def default_executor(device=None) -> Executor:
    """The executor aitune_ray.executor_choice picks for tuning on device: RayExecutor (local single-node mode,
    or the cluster RAY_ADDRESS names) or InlineExecutor. AITUNE_RAY_EXECUTOR=inline or =ray decides instead."""
    from aitune_ray.executor_choice import RAY, choose_executor
    from aitune_ray.inline import InlineExecutor

    choice = choose_executor(device=None if device is None else str(device))
    logger.info("%s", choice.line())
    if choice.kind != RAY:
        return InlineExecutor()
    from aitune_ray.cluster import RayExecutor

    return RayExecutor()


def _tune_one(module, device: torch.device, executor: Executor) -> ModuleReport:
    if not len(module.samples):
        raise RecordingError(f"{module.name} has no recorded samples: call it (or tune() a function that "
                             "calls it) with real inputs before tuning")
    strategy = module.strategy or default_strategy(device)
    # A Ray driver may tune for GPUs it does not have itself: then the module stays on its CPU here.
    local = device if device.type == "cpu" or torch.cuda.is_available() else torch.device("cpu")
    module.module.to(local)
    samples = module.samples.to(local)
    context = TuneContext(module.name, module.module, samples, device, measure=strategy.measure_config)
    logger.info("tuning %s on %s with %s: %d samples, batch sizes %s", module.name, device, strategy.name,
                len(samples), samples.batch_sizes())
    try:
        try:
            report = strategy.tune(context, executor)
        except Exception:
            module.report = context.report
            raise
        module.report = report
        module.gpu_kind = executor.gpu_kind or ""
        with _DRIVER_TIMING:   # the post-deploy check times on the driver: one module at a time
            deploy_checked(module, executor, context, report, strategy)
        executor.discard(context)
    finally:
        _release_workdir(context.workdir, [module.backend, module.report])
    return report


class _Folder:
    """Removes its folder once it is garbage."""

    def __init__(self, path: Path):
        weakref.finalize(self, shutil.rmtree, str(path), True)


def _release_workdir(workdir: Path, users: list) -> None:
    """The module's work folder goes once nothing uses it: its chosen backend (whose files a checkpoint
    save reads may live there) and its report (whose results name artifact files there)."""
    holder = _Folder(workdir)
    for user in users:
        if user is not None:
            user._workdir = holder   # noqa: SLF001 - a reference, nothing else


def tune_modules(modules: Iterable, device=None, executor: Executor | None = None,
                 raise_errors: bool = False, run_dir=None) -> TuningReport:
    """Tune the modules: all at once on an executor with one job-level schedule (every module's work in
    one queue, each module deciding as soon as its own work is done), else one after another. A module that
    fails stays eager, with the reason logged and reported; it never stops another.
    run_dir: a run folder (path or aitune_ray.run_dir.RunFolder) that journals the run and resumes it."""
    modules = list(modules)
    _unique_names(modules)
    with _opened(executor, device) as executor:
        if run_dir is not None:
            from aitune_ray.run_dir import journaled

            executor = journaled(executor, run_dir)
        try:
            dev = executor.resolve_device(device)
            return collect_reports(run_modules([(m, dev, executor) for m in modules], executor), raise_errors)
        finally:
            if run_dir is not None:
                executor.detach()


def run_modules(work: list[tuple], executor: Executor) -> list[tuple]:
    """Tune each (module, device, its executor) of work: concurrently where executor (the one they all use,
    perhaps each through a run folder's journal) runs one schedule for all (Executor.concurrent_modules), else
    in turn. Returns (module, report or None, exception or None) per module, in order. Ctrl-C (or a refused
    run folder) cancels every module's outstanding work and is raised once each module has stopped."""
    if not executor.concurrent_modules or len(work) < 2:
        outcomes = []
        for module, device, own in work:
            outcomes.append(_attempt(module, device, own))
            if _fatal(outcomes[-1][2]):
                module.stay_eager(_why_stopped(outcomes[-1][2]))
                raise outcomes[-1][2]
        return outcomes
    threads = concurrent.futures.ThreadPoolExecutor(max_workers=len(work), thread_name_prefix="aitune-ray-module")
    futures = [threads.submit(_attempt, module, device, own) for module, device, own in work]
    try:
        pending = set(futures)
        while pending:
            done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            fatal = next((f.result()[2] for f in done if _fatal(f.result()[2])), None)
            if fatal is not None:
                raise fatal
    except BaseException as exc:
        executor.stop_all(_why_stopped(exc))
        threads.shutdown(wait=True)
        for future in futures:
            module, report, _ = future.result()
            if report is None:
                module.stay_eager(_why_stopped(exc))
        raise
    threads.shutdown(wait=True)
    return [f.result() for f in futures]


def _why_stopped(exc: BaseException) -> str:
    return "the run folder was refused" if isinstance(exc, RunFolderError) else "interrupted"


def _fatal(exc: BaseException | None) -> bool:
    """An error that stops the whole job: Ctrl-C, or a run folder that is not this run's."""
    return isinstance(exc, (KeyboardInterrupt, SystemExit, RunFolderError))


def _attempt(module, device: torch.device, executor: Executor) -> tuple:
    try:
        return module, _tune_one(module, device, executor), None
    except BaseException as exc:  # noqa: BLE001 - the module's own outcome; collect_reports reports it
        return module, None, exc


def collect_reports(outcomes: list[tuple], raise_errors: bool = False) -> TuningReport:
    """One TuningReport from run_modules' outcomes: a module that failed stays eager, with its reason."""
    report = TuningReport()
    first_error = None
    for module, module_report, exc in outcomes:
        if exc is None:
            report.modules.append(module_report)
            continue
        reason = f"{type(exc).__name__}: {exc}"
        module.stay_eager("the run folder was refused" if isinstance(exc, RunFolderError) else reason)
        if module.report is not None and module.report not in report.modules:
            report.modules.append(module.report)
        report.failures[module.name] = reason
        logger.error("%s stays eager: %s", module.name, reason)
        first_error = first_error or exc
    if raise_errors and first_error is not None:
        raise first_error
    return report


def _tune_all(modules: list, executor: Executor, device, report: TuningReport, raise_errors: bool) -> None:
    dev = executor.resolve_device(device)
    for module in modules:
        try:
            report.modules.append(_tune_one(module, dev, executor))
        except (KeyboardInterrupt, SystemExit):
            module.stay_eager("interrupted")
            raise
        except RunFolderError:   # the run folder is not this run's: nothing is tuned against it
            module.stay_eager("the run folder was refused")
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            module.stay_eager(reason)
            if module.report is not None and module.report not in report.modules:
                report.modules.append(module.report)
            report.failures[module.name] = reason
            logger.error("%s stays eager: %s", module.name, reason)
            if raise_errors:
                raise


def _devices_are_local(executor: Executor | None) -> bool:
    """True when the device to tune for must be on this machine (not on a Ray cluster elsewhere)."""
    if executor is not None:
        return type(executor).resolve_device is Executor.resolve_device
    return not os.environ.get("RAY_ADDRESS")


def _unique_names(modules: list) -> None:
    """Reports, executors and checkpoints key modules by name: give clashing names a numeric suffix."""
    seen: dict[str, int] = {}
    for module in modules:
        count = seen.get(module.name, 0)
        seen[module.name] = count + 1
        if count:
            new = f"{module.name}_{count}"
            logger.warning("two wrapped modules are named %r; the second is tuned as %r (pass name= to "
                           "aitune_ray.Module to choose)", module.name, new)
            module.name = new


def _call(func: Callable, item: Any) -> None:
    if isinstance(item, tuple):
        func(*item)
    elif isinstance(item, dict):
        func(**item)
    else:
        func(item)


def _record(func: Callable, dataset: Iterable) -> list:
    """Call func on every item under a recording session; the wrapped Modules that recorded calls."""
    items = 0
    with recording_session() as reached, torch.no_grad():
        for index, item in enumerate(dataset):
            items += 1
            try:
                _call(func, item)
            except AITuneRayError:
                raise
            except Exception as exc:
                raise DatasetError(f"dataset item {index} ({type(item).__name__}) could not be passed to "
                                   f"{getattr(func, '__name__', type(func).__name__)}: "
                                   f"{type(exc).__name__}: {exc}") from exc
    if items == 0:
        raise DatasetError("the dataset is empty: tune() needs at least one item to record real inputs")
    modules = [m for m in reached if m.state == ModuleState.RECORDING]
    if reached and not modules:
        raise RecordingError(f"every module the function called ({', '.join(m.name for m in reached)}) is already "
                             "tuned; call module.record() on those to record and tune them again")
    if not modules:
        raise RecordingError("no aitune_ray.Module was called by the function: wrap the modules to tune "
                             "with aitune_ray.Module(...)")
    return modules


def tune(func: Callable, dataset: Iterable, device=None, executor: Executor | None = None,
         run_dir=None) -> TuningReport:
    """Call func on each dataset item (a tuple is unpacked into arguments, a dict into keywords),
    recording every wrapped Module reached, then tune each one. Returns a TuningReport.

    run_dir: a folder where each candidate's result is written as soon as it finishes (with the samples
    and the eager baseline); when it holds an earlier run of the same model, only what is missing runs."""
    if _devices_are_local(executor):
        resolve_device(device)  # fail before recording when this machine lacks the device
    if isinstance(dataset, torch.Tensor):
        dataset = [dataset]
    with _opened(executor, device) as executor:   # a Ray executor's actors start up while this process records
        modules = _record(func, dataset)
        report = tune_modules(modules, device=device, executor=executor, run_dir=run_dir)
    from aitune_ray.report.answer import answer

    logger.info("tuning finished: %s", " ".join(answer(m) for m in report.modules) or "no module was tuned")
    return report
