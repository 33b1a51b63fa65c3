"""AITune's dataset semantics: each dataset item is one sample; tune() builds batches of them.

An item is a tensor (one positional input), a tuple or list (positional inputs), a dict (keyword inputs),
or a pair ``(args, kwargs)`` (a tuple or list, then a dict). Items are stacked along a new first
dimension: tensors with torch.stack, numpy arrays likewise, strings into lists, numbers into a tensor,
nested dicts key by key. As AITune's collator (and transformers' default one), a dict's ``label`` or
``label_ids`` is passed as ``labels`` and keys whose value is None are left out. A dataset shorter than a
batch is cycled to fill one batch. Items whose inputs
cannot be stacked (different shapes, unknown types) fail at once with an error that names the item and
says what to write instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterable, Iterator

import torch

from aitune_ray.errors import DatasetError
from aitune_ray.model.datasets import DynamicShapeDataset, repeated

DEFAULT_BATCH_SIZES = (1, 2)   # AITune 0.6.0's tune() default
AS_GIVEN_HINT = "pass call_as_given=True to tune() to call the function with each item as given"


def _stack(values: list, where: str) -> Any:
    first = values[0]
    if isinstance(first, torch.Tensor):
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) > 1:
            raise DatasetError(f"{where}: items of different shapes {sorted(shapes)} cannot be stacked into one "
                               "batch; put the samples in an aitune_ray.dataloader.DynamicShapeDataset (each batch "
                               f"is then one sample repeated, and every shape is recorded), or {AS_GIVEN_HINT}")
        return torch.stack(values)
    if type(first).__module__ == "numpy" and hasattr(first, "shape"):
        import numpy as np

        return torch.from_numpy(np.stack(values))
    if isinstance(first, str):
        return list(values)
    if isinstance(first, bool | int | float):
        return torch.tensor(values)
    if isinstance(first, Mapping):
        return {k: _stack([v[k] for v in values], f"{where}[{k!r}]") for k in first}
    if first is None:
        return None
    raise DatasetError(f"{where}: a {type(first).__name__} cannot be batched; {AS_GIVEN_HINT}")


def _keywords(items: list, where: str) -> dict:
    """Dict items (keyword inputs) batched as AITune's and transformers' default collators do: "label" (numbers)
    or "label_ids" become "labels"; keys whose first value is None are left out."""
    first = items[0]
    batch: dict = {}
    if first.get("label") is not None:
        label = first["label"].item() if isinstance(first["label"], torch.Tensor) else first["label"]
        dtype = torch.long if isinstance(label, int) else torch.float
        batch["labels"] = torch.tensor([i["label"] for i in items], dtype=dtype)
    elif first.get("label_ids") is not None:
        ids = first["label_ids"]
        if isinstance(ids, torch.Tensor):
            batch["labels"] = torch.stack([i["label_ids"] for i in items])
        else:
            dtype = torch.long if isinstance(ids[0], int) else torch.float
            batch["labels"] = torch.tensor([i["label_ids"] for i in items], dtype=dtype)
    for key, value in first.items():
        if key not in ("label", "label_ids") and value is not None:
            batch[key] = _stack([i[key] for i in items], f"{where}[{key!r}]")
    return batch


def _positional(items: list, where: str) -> list:
    lengths = {len(i) for i in items}
    if len(lengths) > 1:
        raise DatasetError(f"{where}: items have different numbers of inputs {sorted(lengths)}")
    return [_stack([i[n] for i in items], f"{where}, input {n}") for n in range(len(items[0]))]


def _is_pair(item: Any) -> bool:
    return (isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], tuple | list)
            and isinstance(item[1], Mapping))


def collate(items: list) -> tuple[list, dict]:
    """(args, kwargs) of one batch made of items (each one sample)."""
    first = items[0]
    kinds = {type(i) for i in items}
    where = f"dataset items of type {first.__class__.__name__}"
    if any(isinstance(i, Mapping) for i in items) and not all(isinstance(i, Mapping) for i in items):
        raise DatasetError(f"dataset mixes dicts and other items ({sorted(k.__name__ for k in kinds)}): "
                           "every item must have the same form")
    if _is_pair(first):
        return _positional([i[0] for i in items], where), _keywords([i[1] for i in items], where)
    if isinstance(first, Mapping):
        return [], _keywords(items, where)
    if isinstance(first, tuple | list):
        return _positional(items, where), {}
    return [_stack(items, where)], {}


class DataLoaderFactory:
    """AITune's DataLoaderFactory: makes a torch DataLoader of the dataset at a given batch size.

    dataset: a sequence or torch Dataset of samples. collate_fn: turns a list of samples into one batch
    (default: default_data_collator, whose batches are AITune's: a list of positional inputs, a dict of keyword
    inputs, or an (args list, kwargs dict) tuple); a custom one returns a tensor, a tuple/list of positional
    inputs, a dict of keyword inputs or an (args, kwargs) pair, as AITune reads it.
    num_workers: the DataLoader's worker processes.
    """

    def __init__(self, dataset: Any, collate_fn: Callable | None = None, num_workers: int = 0):
        self.dataset = dataset
        self.collate_fn = collate_fn or default_data_collator
        self.num_workers = num_workers

    def create_dataloader(self, batch_size: int) -> torch.utils.data.DataLoader:
        dataset = self.dataset
        if isinstance(dataset, DynamicShapeDataset):   # samples of different shapes: one per batch, repeated
            dataset = repeated(dataset, batch_size)
        elif len(dataset) < batch_size:   # too few samples for one batch: cycle them to fill it
            dataset = [dataset[i % len(dataset)] for i in range(batch_size)]
        return torch.utils.data.DataLoader(dataset, batch_size=batch_size, collate_fn=self.collate_fn,
                                           drop_last=True, num_workers=self.num_workers)


class _Args(list):
    """The default collator's positional inputs: a list, as AITune's, told apart from a list whose second
    input happens to be a dict."""


class _Pair(tuple):
    """The default collator's batch of (args, kwargs) items: (args list, kwargs dict), as AITune's."""

    def __new__(cls, args: list, kwargs: dict):
        return super().__new__(cls, (args, kwargs))


def default_data_collator(items: list) -> list | dict | tuple:
    """AITune's default collate_fn: a batch of items as AITune's collator returns it, a list of positional
    inputs (a tensor item is one input), a dict of keyword inputs, or (args, kwargs) for (args, kwargs) items.
    Unlike AITune 0.6.0's, (args, kwargs) items are batched item by item (AITune's takes the first item alone
    and stacks its positional inputs into one tensor: docs/aitune.md)."""
    args, kwargs = collate(items)
    if _is_pair(items[0]):
        return _Pair(_Args(args), kwargs)
    if isinstance(items[0], Mapping):
        return kwargs
    return _Args(args)


def _split(batch: Any) -> tuple[list, dict]:
    if isinstance(batch, _Pair):
        return list(batch[0]), batch[1]
    if isinstance(batch, _Args):
        return list(batch), {}
    if isinstance(batch, Mapping):
        return [], dict(batch)
    if isinstance(batch, torch.Tensor):
        return [batch], {}
    if _is_pair(batch):
        return list(batch[0]), dict(batch[1])
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        return list(batch), {}
    return [batch], {}


def as_factory(dataset: Any) -> DataLoaderFactory:
    """dataset as a DataLoaderFactory: a tensor is one sample; an iterable without len() is read once."""
    if isinstance(dataset, DataLoaderFactory):
        return dataset
    if isinstance(dataset, torch.Tensor):
        return DataLoaderFactory([dataset])
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or isinstance(dataset, Mapping):
        if isinstance(dataset, Mapping):
            raise DatasetError("the dataset is a dict: give a list of dicts (each one sample of keyword inputs)")
        dataset = list(dataset)
    return DataLoaderFactory(dataset)


def check_batch_sizes(batch_sizes: Iterable[int] | None) -> list[int]:
    """batch_sizes as given (AITune's default [1, 2] for None or empty); each a positive int."""
    sizes = list(batch_sizes) if batch_sizes else list(DEFAULT_BATCH_SIZES)
    for size in sizes:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise DatasetError(f"batch_sizes must be positive integers, got {size!r}")
    return sizes


def batches(dataset: Any, batch_sizes: Iterable[int] | None = None,
            max_num_batches_per_batch_size: int | None = None) -> Iterator[tuple[int, list, dict]]:
    """(batch size, args, kwargs) for every batch: all batches of the first size, then of the next.

    max_num_batches_per_batch_size: at most this many batches of each size (None: every full batch)."""
    if max_num_batches_per_batch_size is not None and (not isinstance(max_num_batches_per_batch_size, int)
                                                       or max_num_batches_per_batch_size < 1):
        raise DatasetError("max_num_batches_per_batch_size must be a positive integer or None, "
                           f"got {max_num_batches_per_batch_size!r}")
    factory = as_factory(dataset)
    if len(factory.dataset) == 0:
        raise DatasetError("the dataset is empty: tune() needs at least one item to record real inputs")
    for size in check_batch_sizes(batch_sizes):
        loader = factory.create_dataloader(size)
        for batch in itertools.islice(loader, max_num_batches_per_batch_size):
            args, kwargs = _split(batch)
            yield size, args, kwargs


def cycled(dataset: Any, count: int) -> DataLoaderFactory:
    """dataset as a DataLoaderFactory of exactly count samples: its items in order, from the start again
    when it has fewer (AITune's ensure_enough_samples). A DataLoaderFactory keeps its collate_fn and workers."""
    if not isinstance(count, int) or count < 1:
        raise DatasetError(f"the number of samples must be a positive integer, got {count!r}")
    factory = as_factory(dataset)
    items = factory.dataset
    if len(items) == 0:
        raise DatasetError("the dataset is empty: give at least one item")
    kept = [items[i % len(items)] for i in range(count)]
    if isinstance(items, DynamicShapeDataset):
        kept = DynamicShapeDataset(kept)
    return DataLoaderFactory(kept, factory.collate_fn, factory.num_workers)


def samples_generator(dataset: Any, batch_sizes: Iterable[int],
                      max_num_batches_per_batch_size: int | None = None) -> Iterator[tuple[int, list, dict]]:
    """AITune's samples_generator: (batch size, args, kwargs) of every batch tune() makes of dataset."""
    return batches(dataset, list(batch_sizes), max_num_batches_per_batch_size)


def ensure_enough_samples(dataset: Any, number_of_samples: int) -> Any:
    """AITune's ensure_enough_samples: exactly number_of_samples items, from the start again when the dataset
    has fewer (a list, empty for an empty dataset; a DataLoaderFactory keeps its collate_fn and workers)."""
    if isinstance(dataset, DataLoaderFactory):
        return cycled(dataset, number_of_samples)
    if isinstance(number_of_samples, int) and number_of_samples <= 0:
        raise DatasetError(f"number_of_samples must be greater than 0, got {number_of_samples}")
    if isinstance(dataset, Sequence) and not isinstance(dataset, str) and len(dataset) == 0:
        return []   # nothing to repeat (AITune returns the empty list too)
    return list(cycled(dataset, number_of_samples).dataset)
