"""find_max_batch_size: the largest batch a module runs on the device, by doubling then bisection.

A strategy turns it on with ``enable_find_max_batch_size()`` (off by default here: the recorded batch sizes
are what the choice is made on). tune() then calls the module eagerly on its largest recorded sample
repeated along the batch dimension at twice its batch size, then twice that, until a call runs out of
memory or the limit is reached, and bisects between the last size that ran and the first that did not.
The found size is added to the module's recorded samples (one call), so the candidates are built,
checked and timed at it too. On the CPU, where running out of memory is slow and may take the host down
first, the search stops at the strategy's limit (``CPU_LIMIT`` unless given).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from aitune_ray.runtime.device import resolve_device
from aitune_ray.errors import ConfigError
from aitune_ray.model.samples import Sample, map_structure

logger = logging.getLogger(__name__)

CPU_LIMIT = 64          # the largest batch tried on the CPU unless the strategy names another
DEVICE_LIMIT = 2 ** 20  # elsewhere: AITune's largest profiled batch size


def check_limit(limit: Any) -> int | None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ConfigError(f"the find_max_batch_size limit must be a positive integer or None, got {limit!r}")
    return limit


def search(fits: Callable[[int], bool], start: int, limit: int) -> int:
    """The largest size n in [start, limit] with fits(n), assuming sizes that fit form a prefix: doubling
    from start until a size does not fit or the limit is reached, then bisection below the first that
    did not fit. start itself is taken to fit (it was recorded)."""
    good, bad = start, None
    while bad is None and good < limit:
        trial = min(good * 2, limit)
        if fits(trial):
            good = trial
        else:
            bad = trial
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def _out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def tiled(sample: Sample, size: int) -> tuple[tuple, dict]:
    """sample's inputs at batch size `size`: every tensor whose first dimension is the sample's batch size
    is repeated along it (rows cycled); the other inputs are kept as they are."""
    index = None

    def grow(t: torch.Tensor) -> torch.Tensor:
        nonlocal index
        if t.dim() == 0 or t.shape[0] != sample.batch_size:
            return t
        if index is None or index.device != t.device:
            index = torch.arange(size, device=t.device) % sample.batch_size
        return t.index_select(0, index)

    return map_structure(sample.args, grow), map_structure(sample.kwargs, grow)


def find_max_batch_size(module, device: torch.device, limit: int | None = None) -> int:
    """The largest batch the wrapped module's inner module runs on device (see the module docstring);
    the found size is added to its samples when it was not recorded."""
    with module.unpatched():   # the inner module's own forward, not the wrapper's proxy (which would record)
        return _find_max_batch_size(module, device, limit)


def _find_max_batch_size(module, device: torch.device, limit: int | None) -> int:
    inner = module.module.to(device)
    largest = max(module.samples.samples, key=lambda s: s.batch_size).to(device)
    limit = limit or (CPU_LIMIT if device.type == "cpu" else DEVICE_LIMIT)
    ran: dict[int, Any] = {}

    def fits(size: int) -> bool:
        args, kwargs = tiled(largest, size)
        try:
            with torch.no_grad():
                outputs = inner(*args, **kwargs)
            ran.clear()   # sizes that run only grow: the last one is the one found
            ran[size] = (args, kwargs, outputs)
            return True
        except Exception as exc:   # noqa: BLE001 - the size does not fit; what else went wrong is logged
            if not _out_of_memory(exc):
                logger.info("%s: batch size %d does not run (%s: %s); taken as too large", module.name, size,
                            type(exc).__name__, exc)
            return False
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()

    found = search(fits, largest.batch_size, max(limit, largest.batch_size))
    logger.info("%s: the largest batch size that runs on %s is %d (limit %d)", module.name, device, found, limit)
    if found not in module.samples.batch_sizes():
        args, kwargs, outputs = ran.get(found) or (*tiled(largest, found), None)
        if outputs is None:
            with torch.no_grad():
                outputs = inner(*args, **kwargs)
        module.samples.samples.append(Sample(args, kwargs, map_structure(outputs, lambda t: t.detach()), found))
    return found


def find_max_batch_sizes(modules: list, device, local: bool = True) -> None:
    """Run the search for every module whose strategy turned it on. local False: the modules are tuned on
    a device this process may not have (a Ray cluster elsewhere), where the search cannot run."""
    for module in modules:
        strategy = module.strategy
        if strategy is None or not getattr(strategy, "find_max_batch_size_enabled", False):
            continue
        if not local:
            logger.warning("%s: find_max_batch_size runs on the device the module is tuned for, which this "
                           "process does not have: skipped", module.name)
            continue
        find_max_batch_size(module, resolve_device(device), strategy.find_max_batch_size_limit)
