"""tune() and tune_modules(): record, then tune each wrapped module (save() and load() live in checkpoint)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib.util
import logging
import os
import shutil
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from aitune_ray.measure.request import ServingContext
from aitune_ray.model.dataloader import batches
from aitune_ray.worker.seam import Executor, TuneContext
from aitune_ray.runtime.device import resolve_device
from aitune_ray.errors import AITuneRayError, ConfigError, DatasetError, RecordingError, RunFolderError
from aitune_ray.model.max_batch import find_max_batch_sizes
from aitune_ray.model.recording import ModuleState, recording_session
from aitune_ray.tune_strategy.deploy import deploy_checked
from aitune_ray.report.model import ModuleReport, TuningReport

logger = logging.getLogger(__name__)

# A "module" here is an aitune_ray.Module; this file does not import module.py, which imports it (Module.tune).



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
def _opened(executor: Executor | str | None, device=None) -> Iterator[Executor]:
    """executor, opened; None or a name ("ray", "inline", "auto"): that executor for device, which is also
    closed at the end."""
    own = executor is None or isinstance(executor, str)
    executor = default_executor(device, executor) if own else executor
    try:
        executor.open()
        yield executor
    finally:
        if own:
            executor.close()


def default_executor(device=None, requested: str | None = None) -> Executor:
    """The executor aitune_ray.executors.choice picks for tuning on device: RayExecutor (local single-node mode,
    or the cluster RAY_ADDRESS names) or InlineExecutor. requested ("ray", "inline" or "auto"), else
    AITUNE_RAY_EXECUTOR=inline or =ray, decides instead."""
    from aitune_ray.executors.choice import INLINE, RAY, choose_executor
    from aitune_ray.executors.inline import InlineExecutor

    if requested is not None and requested not in (RAY, INLINE, "auto"):
        raise ConfigError(f"executor {requested!r}: give an Executor, or 'ray', 'inline' or 'auto'")
    choice = choose_executor(requested, device=None if device is None else str(device))
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
    serving = getattr(module, "serving", None) or ServingContext.of_this_process()
    context = TuneContext(module.name, module.module, samples, device, measure=strategy.measure_config,
                          serving=serving)
    logger.info("tuning %s on %s with %s: %d samples, batch sizes %s", module.name, device, strategy.name,
                len(samples), samples.batch_sizes())
    try:
        try:
            with module.unpatched():   # builds see the module as it was: its own forward, no hooks
                report = strategy.tune(context, executor)
        except Exception:
            module.report = context.report
            raise
        module.report = report
        module.gpu_kind = executor.gpu_kind or ""
        deploy_checked(module, executor, context, report, strategy)   # its timing: one module at a time
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


def serving_context(serving_threads: int | None = None) -> ServingContext:
    """The serving context the figures must hold in: serving_threads torch threads (None: this process's
    torch.get_num_threads() now), in the process that calls tune()."""
    if serving_threads is None:
        return ServingContext.of_this_process()
    if isinstance(serving_threads, bool) or not isinstance(serving_threads, int) or serving_threads < 1:
        raise ConfigError(f"serving_threads takes a positive int (torch threads) or None, got {serving_threads!r}")
    return dataclasses.replace(ServingContext.of_this_process(), torch_threads=serving_threads)


def tune_modules(modules: Iterable, device=None, executor: Executor | str | None = None,
                 raise_errors: bool = False, run_dir=None, *, serving_threads: int | None = None) -> TuningReport:
    """Tune the modules: all at once on an executor with one job-level schedule (every module's work in
    one queue, each module deciding as soon as its own work is done), else one after another. A module that
    fails stays eager, with the reason logged and reported; it never stops another.
    run_dir: a run folder (path or aitune_ray.executors.run_dir.RunFolder) that journals the run and resumes it.
    serving_threads: the torch thread count the module is served with (None: this process's, now); every
    confirm session runs with it, on every executor, and the report says so (docs/measurement.md)."""
    modules = list(modules)
    _unique_names(modules)
    serving = serving_context(serving_threads)
    for module in modules:
        module.serving = serving
    with _opened(executor, device) as executor:
        if run_dir is not None:
            from aitune_ray.executors.run_dir import journaled

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
    if isinstance(executor, Executor):
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


def _func_name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _calls_as_given(func: Callable, dataset: Iterable) -> Iterator[Callable[[], None]]:
    """One call per item, as given: a tuple is unpacked into arguments, a dict into keywords."""
    if isinstance(dataset, torch.Tensor):
        dataset = [dataset]
    for index, item in enumerate(dataset):
        yield f"dataset item {index} ({type(item).__name__})", functools.partial(_call, func, item)


def _calls_batched(func: Callable, dataset: Any, batch_sizes, max_batches) -> Iterator[Callable[[], None]]:
    """One call per batch that AITune would build: each item one sample, batches at batch_sizes."""
    for index, (size, args, kwargs) in enumerate(batches(dataset, batch_sizes, max_batches)):
        yield f"batch {index} (batch size {size})", functools.partial(func, *args, **kwargs)


def _record(func: Callable, calls: Iterator) -> list:
    """Make every call under a recording session; the wrapped Modules that recorded calls."""
    made = 0
    with recording_session() as reached, torch.no_grad():
        for where, call in calls:
            made += 1
            try:
                call()
            except AITuneRayError:
                raise
            except Exception as exc:
                raise DatasetError(f"{where} could not be passed to {_func_name(func)}: "
                                   f"{type(exc).__name__}: {exc}") from exc
    if made == 0:
        raise DatasetError("the dataset is empty: tune() needs at least one item to record real inputs")
    modules = [m for m in reached if m.state == ModuleState.RECORDING]
    if reached and not modules:
        raise RecordingError(f"every module the function called ({', '.join(m.name for m in reached)}) is already "
                             "tuned; call module.record() on those to record and tune them again")
    if not modules:
        raise RecordingError("no aitune_ray.Module was called by the function: wrap the modules to tune "
                             "with aitune_ray.Module(...)")
    return modules


def _check_tune_arguments(batch_sizes, max_num_batches_per_batch_size, call_as_given: bool) -> None:
    if isinstance(batch_sizes, str | torch.device):
        raise ConfigError(f"tune()'s third argument is batch_sizes (as in AITune), got {batch_sizes!r}: "
                          "pass the device by keyword, device=...")
    if call_as_given and (batch_sizes is not None or max_num_batches_per_batch_size is not None):
        raise ConfigError("batch_sizes and max_num_batches_per_batch_size build batches from samples; with "
                          "call_as_given=True each dataset item is already one call: leave them out")


@contextlib.contextmanager
def _quiet_libraries(enabled: bool) -> Iterator[None]:
    """While tuning, the libraries' own loggers print errors only (AITune's disable_external_logging)."""
    if not enabled:
        yield
        return
    loggers = [logging.getLogger(name) for name in EXTERNAL_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


EXTERNAL_LOGGERS = ("torch", "onnx", "onnxruntime", "onnxscript", "tensorrt", "torch_tensorrt", "torchao",
                    "modelopt", "ray")


def _dry_run(modules: list, device) -> TuningReport:
    """Record only: say what each module would be tuned with, build nothing, keep every module recording."""
    for module in modules:
        strategy = module.strategy or default_strategy(resolve_device(device) if device else torch.device("cpu"))
        backends = ", ".join(b.describe() for b in getattr(strategy, "backends", []))
        logger.info("dry run: %s would be tuned with %s over [%s] on recorded batch sizes %s (%d samples)",
                    module.name, strategy.name, backends, module.samples.batch_sizes(), len(module.samples))
    return TuningReport()


def tune(func: Callable, dataset: Any, batch_sizes: list[int] | None = None,
         max_num_batches_per_batch_size: int | None = None, device=None, dry_run: bool = False,
         disable_external_logging: bool = False, clear_cache: bool = False, ignore_failing_modules: bool = True,
         *, call_as_given: bool = False, executor: Executor | str | None = None, run_dir=None,
         serving_threads: int | None = None) -> TuningReport:
    """Record every wrapped Module that func reaches on the dataset, then tune each one. Returns a
    TuningReport (AITune's tune() returns None).

    As in AITune, each dataset item is one sample (a tensor, a tuple/list of inputs, a dict of keyword
    inputs, or an (args, kwargs) pair; a tensor dataset is one sample) and func is called on batches of
    them at each of batch_sizes (default [1, 2]), at most max_num_batches_per_batch_size batches of
    each (default: every full batch). A DataLoaderFactory gives its own loader.
    call_as_given=True calls func once per item as given instead (a tuple is unpacked into arguments, a
    dict into keywords), for pipelines whose inputs cannot be batched.
    executor: an Executor, or "ray", "inline" or "auto" (None: aitune_ray.executors.choice picks).
    dry_run: record and log what would be tuned; build nothing, the modules stay recording.
    ignore_failing_modules: a module that fails stays eager and tuning goes on (False: raise).
    clear_cache: accepted for AITune code; nothing is cached between runs here (work folders are
    removed after each run; a run folder is cleared by giving a new run_dir).
    run_dir: a folder where each candidate's result is written as soon as it finishes (with the samples
    and the eager baseline); when it holds an earlier run of the same model, only what is missing runs.
    serving_threads: the torch thread count the model is served with (None: torch.get_num_threads() of
    this process when tune() is called). Every figure the report gives as the answer was measured with it,
    on every executor (a Ray actor sets it for the session); the report states it."""
    serving = serving_context(serving_threads)
    _check_tune_arguments(batch_sizes, max_num_batches_per_batch_size, call_as_given)
    if clear_cache:
        logger.info("clear_cache: nothing to clear, no build is cached between runs")
    local = _devices_are_local(executor)
    if local:
        resolve_device(device)  # fail before recording when this machine lacks the device
    calls = (_calls_as_given(func, dataset) if call_as_given
             else _calls_batched(func, dataset, batch_sizes, max_num_batches_per_batch_size))
    with _quiet_libraries(disable_external_logging):
        if dry_run:
            return _dry_run(_record(func, calls), device)
        with _opened(executor, device) as executor:   # a Ray executor's actors start up while this process records
            modules = _record(func, calls)
            find_max_batch_sizes(modules, device, local=local)
            report = tune_modules(modules, device=device, executor=executor, run_dir=run_dir,
                                  raise_errors=not ignore_failing_modules, serving_threads=serving.torch_threads)
    from aitune_ray.report.answer import answer

    logger.info("tuning finished: %s", " ".join(answer(m) for m in report.modules) or "no module was tuned")
    return report
