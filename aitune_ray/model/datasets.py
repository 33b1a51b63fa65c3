"""AITune's datasets of samples whose shapes vary (`aitune.torch.dataloader`'s, by the same names).

A `DynamicShapeDataset` is a list whose samples differ in shape (a sequence length, an image size): they
cannot share a batch, so each batch is made of one sample repeated (`repeated`), and every shape is
recorded, which is how the dynamic dimensions' range reaches the backends. `MinMaxRandomDataset` makes one
from `InputConfig`s: the smallest and largest shapes first, then random shapes between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch

from aitune_ray.errors import DatasetError

#: What a dataset may be: a sequence of samples or a torch Dataset (AITune's DatasetLike).
DatasetLike = Union[Sequence, torch.utils.data.Dataset]


@dataclass
class InputConfig:
    """One input of a MinMaxRandomDataset: its shape range (max_input defaults to min_input), dtype, the
    keyword it is passed as (None: positional) and the range its values are drawn from."""

    min_input: Any
    max_input: Any = None
    dtype: torch.dtype = torch.float32
    kwarg_name: str | None = None
    min_value: int | float = 0
    max_value: int | float = 1

    def __post_init__(self):
        if self.max_input is None:
            self.max_input = self.min_input
        if len(self.min_input) != len(self.max_input):
            raise DatasetError(f"InputConfig: min_input {tuple(self.min_input)} and max_input "
                               f"{tuple(self.max_input)} have different numbers of dimensions")
        if any(low > high for low, high in zip(self.min_input, self.max_input)):
            raise DatasetError(f"InputConfig: min_input {tuple(self.min_input)} is above max_input "
                               f"{tuple(self.max_input)} in some dimension")


class DynamicShapeDataset(list, torch.utils.data.Dataset):
    """A list of samples of different shapes: each batch is one sample repeated to the batch size."""


class MinMaxRandomDataset(DynamicShapeDataset):
    """num_samples samples of random shapes within each InputConfig's range: with include_min_max_shapes
    (the default) the first is at every minimum and the second at every maximum. Inputs with a kwarg_name
    make dict samples (all must have one, or none)."""

    def __init__(self, num_samples: int, input_configs: list[InputConfig], include_min_max_shapes: bool = True,
                 generator: torch.Generator | None = None):
        least = 2 if include_min_max_shapes else 1
        if num_samples < least:
            raise DatasetError(f"num_samples must be at least {least}, got {num_samples}")
        named = {config.kwarg_name is not None for config in input_configs}
        if len(named) > 1:
            raise DatasetError("All input configs must have either a kwarg_name or none")
        self.num_samples = num_samples
        self.input_configs = list(input_configs)
        self.include_min_max_shapes = include_min_max_shapes
        self.is_dict = named == {True}
        shapes = [self._shapes(lambda c: c.min_input), self._shapes(lambda c: c.max_input)] \
            if include_min_max_shapes else []
        while len(shapes) < num_samples:
            shapes.append(self._shapes(lambda c: [int(torch.randint(lo, hi + 1, (), generator=generator))
                                                  for lo, hi in zip(c.min_input, c.max_input)]))
        super().__init__(self._sample(s, generator) for s in shapes)

    def _shapes(self, pick) -> list[list[int]]:
        return [list(pick(config)) for config in self.input_configs]

    def _sample(self, shapes: list[list[int]], generator: torch.Generator | None):
        tensors = [_uniform(shape, config, generator) for shape, config in zip(shapes, self.input_configs)]
        if self.is_dict:
            return {config.kwarg_name: t for config, t in zip(self.input_configs, tensors)}
        return tensors


def _uniform(shape: list[int], config: InputConfig, generator: torch.Generator | None) -> torch.Tensor:
    if config.dtype.is_floating_point:
        out = torch.empty(shape, dtype=config.dtype)
        return out.uniform_(config.min_value, config.max_value, generator=generator)
    return torch.randint(int(config.min_value), int(config.max_value) + 1, shape, dtype=config.dtype,
                         generator=generator)


class SingleBatchDatasetWrapper(torch.utils.data.Dataset):
    """dataset's items repeated in order to make exactly batch_size items (one batch of a short dataset)."""

    def __init__(self, dataset: DatasetLike, batch_size: int):
        self.dataset = dataset
        self.batch_size = batch_size

    def __len__(self) -> int:
        return self.batch_size

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index % len(self.dataset)]


def repeated(dataset: DynamicShapeDataset, batch_size: int) -> list:
    """Each sample batch_size times in a row, so that every batch holds one shape."""
    return [sample for sample in dataset for _ in range(batch_size)]
