"""What every exporter exports: the module called with the tensor leaves of one recorded call, nothing else.

Users call a module with keywords, non-tensor values (floats, bools, None, ``return_dict=True``) and nested
containers; forward may take some of them through ``**kwargs``. Exporters (torch.export for AOTInductor and
Torch-TensorRT, torch.onnx for ONNX Runtime and TensorRT) each match such a call to forward's signature their
own way, and torch.export cannot mark dynamic axes in a dict that holds a bool. So no exporter sees the call:
``prepare(module, samples)`` binds the recorded calls by name (model.calls), takes the largest one, and gives
``FlatCall``: a module whose forward takes only that call's tensor leaves, positionally (``*tensors``), puts
them back into the call with its non-tensor values as constants, and returns the tensor leaves of the
module's outputs. Dynamic shapes are keyed by that forward's own parameter (``dynamic_shapes(per_leaf)``).
At run time backend.baked_call checks a call's non-tensor values against the constants, gives the graph the
call's tensor leaves in the same order, and rebuilds the outputs (a ModelOutput as that class).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from aitune_ray.model.calls import CallForm, bound_samples
from aitune_ray.model.samples import Sample, SampleStore, tensors_of
from aitune_ray.model.structure import Structure

#: The name of FlatCall.forward's one parameter: the key of its dynamic shapes.
PARAMETER = "tensors"


class FlatCall(nn.Module):
    """module called with the tensor leaves of call (its other values baked in), returning the tensor leaves
    of its outputs as a tuple."""

    def __init__(self, module: nn.Module, call: CallForm):
        super().__init__()
        self.module = module
        self.form = call
        self.training = module.training   # its own flag only: train()/eval() would reach the module's layers

    def forward(self, *tensors: torch.Tensor) -> tuple:
        args, kwargs = self.form.rebuild(list(tensors))
        return tuple(tensors_of(self.module(*args, **kwargs)))


@dataclasses.dataclass
class FlatExport:
    """What an exporter needs: the wrapper, the exported call's tensors (its example inputs), the call's form,
    the outputs' structure, the sample exported on, and the recorded samples this graph serves (bound; the
    others' non-tensor values differ, and they run eagerly)."""

    module: FlatCall
    leaves: list[torch.Tensor]
    call: CallForm
    outputs: Structure
    sample: Sample
    served: SampleStore

    def batch_axes(self, dim: Any) -> list[dict[int, Any] | None]:
        """Per tensor leaf, {0: dim} where its leading axis follows the batch size in every served sample and
        those hold several batch sizes; else None."""
        sizes = [s.batch_size for s in self.served]
        if len(set(sizes)) < 2:
            return [None] * len(self.leaves)
        leaves = [self.call.leaves(s.args, s.kwargs) for s in self.served]
        return [{0: dim} if follows else None for follows in follows_batch(leaves, sizes)]


def prepare(module: nn.Module, samples: SampleStore) -> FlatExport:
    """The tensors-only wrapper of module on its largest recorded call (see the module docstring)."""
    if len(samples) == 0:
        raise ValueError("no recorded samples to export with")
    samples = bound_samples(module, samples)
    sample = max(samples, key=lambda s: s.batch_size)
    leaves, call = CallForm.of(module, sample.args, sample.kwargs)
    if not leaves:
        raise ValueError("the module takes no tensor input")
    outputs = Structure.of(sample.outputs)[1]
    served = SampleStore([s for s in samples if call.leaves(s.args, s.kwargs) is not None])
    return FlatExport(FlatCall(module, call), leaves, call, outputs, sample, served)


def follows_batch(leaves_per_sample: list[list[torch.Tensor]], batch_sizes: list[int]) -> list[bool]:
    """For each leaf position: does its leading axis equal the batch size in every sample?"""
    first = leaves_per_sample[0]
    return [all(len(leaves) == len(first) and leaves[i].dim() > 0 and leaves[i].shape[0] == bs
                for leaves, bs in zip(leaves_per_sample, batch_sizes))
            for i in range(len(first))]


def dynamic_shapes(per_leaf: list[dict[int, Any] | None]) -> dict | None:
    """torch.export's dynamic_shapes for FlatCall: {axis: Dim} (or None) per tensor leaf, keyed by its
    parameter; None where no axis is dynamic."""
    if not any(per_leaf):
        return None
    return {PARAMETER: tuple(axes or None for axes in per_leaf)}
