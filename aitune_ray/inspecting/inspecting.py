"""inspect(): which nn.Modules of a pipeline run, how often, and what share of the time each takes."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import torch

from aitune_ray.model.dataloader import cycled
from aitune_ray.errors import AITuneRayError, ConfigError, DatasetError, NotCallableError
from aitune_ray.inspecting.finder import ModuleFinder, synchronize
from aitune_ray.inspecting.module_info import InspectedModulesInfo
from aitune_ray.measure.timing import clock_in_use
from aitune_ray.api.tuning import _calls_as_given, _calls_batched, _func_name

logger = logging.getLogger(__name__)

DEFAULT_INSPECT_ITERATIONS = 10
DEFAULT_WARMUP_ITERATIONS = 5


def inspect(obj: Callable | torch.nn.Module, dataset: Any, inference_function: Callable | None = None,
            number_of_iterations: int = DEFAULT_INSPECT_ITERATIONS,
            warmup_iterations: int = DEFAULT_WARMUP_ITERATIONS, min_depth: int = 0, max_depth: int = 5, *,
            call_as_given: bool = False) -> InspectedModulesInfo:
    """Run a pipeline over the dataset and report the nn.Modules reachable from obj that it called.

    obj: the pipeline object (or a module) searched for modules: attributes, list items and dict values,
    up to max_depth steps deep (aitune_ray.inspecting.finder). inference_function: what is called (default:
    obj). Each dataset item is one sample, as in tune(); the function is called on batches of one, first
    warmup_iterations times (not counted), then number_of_iterations times, each call timed between two
    CUDA synchronizes; a dataset with fewer items is used again from the start. call_as_given=True calls
    the function with each item as given instead, as tune() does. The modules reported are the outermost
    ones called at depth min_depth or more (raise it to look inside a pipeline that is itself one module).
    Returns InspectedModulesInfo; pass its get_modules(...) to wrap()."""
    _check(number_of_iterations, warmup_iterations, min_depth, max_depth)
    func = obj if inference_function is None else inference_function
    if not callable(func):
        raise NotCallableError(f"inspect: {type(func).__name__} is not callable; pass inference_function=...")
    samples = cycled(dataset, max(number_of_iterations, warmup_iterations))
    clock = clock_in_use() or time.perf_counter
    finder = ModuleFinder(min_depth, max_depth, clock)
    finder.find(obj)
    logger.info("inspect: %d modules found on %s; %d warm-up and %d timed iterations", len(finder.found),
                type(obj).__name__, warmup_iterations, number_of_iterations)
    try:
        with torch.no_grad():
            for where, call in _calls(func, samples, warmup_iterations, call_as_given):
                _run(func, where, call, clock)
            finder.forget_calls()
            total = sum(_run(func, where, call, clock)
                        for where, call in _calls(func, samples, number_of_iterations, call_as_given))
    finally:
        finder.restore()
    info = InspectedModulesInfo(total, number_of_iterations)
    for module in finder.outermost_called():
        info.add_module(module)
    if not len(info):
        logger.warning("inspect: no torch.nn.Module reachable from %s within %d steps was called",
                       type(obj).__name__, max_depth)
    return info


def _check(number_of_iterations: int, warmup_iterations: int, min_depth: int, max_depth: int) -> None:
    for name, value, least in (("number_of_iterations", number_of_iterations, 1),
                               ("warmup_iterations", warmup_iterations, 0), ("min_depth", min_depth, 0),
                               ("max_depth", max_depth, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"inspect: {name} must be an integer of at least {least}, got {value!r}")
    if min_depth > max_depth:
        raise ConfigError(f"inspect: min_depth {min_depth} is above max_depth {max_depth}")


def _calls(func: Callable, samples, count: int, call_as_given: bool):
    if count == 0:
        return iter(())
    if call_as_given:
        return _calls_as_given(func, samples.dataset[:count])
    return _calls_batched(func, samples, [1], count)


def _run(func: Callable, where: str, call: Callable[[], None], clock: Callable[[], float]) -> float:
    """Seconds one call of the function took, between two synchronizes."""
    synchronize()
    start = clock()
    try:
        call()
    except AITuneRayError:
        raise
    except Exception as exc:
        raise DatasetError(f"inspect: {where} could not be passed to {_func_name(func)}: "
                           f"{type(exc).__name__}: {exc}") from exc
    synchronize()
    return clock() - start
