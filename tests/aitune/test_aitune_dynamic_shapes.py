"""AITune 0.6.0's unit tests of aitune.torch.dynamic_shapes (tests/unit/torch/test_dynamic_shapes.py), ported:
the same dimensions and assertions, `aitune.torch` read as `aitune_ray` and AITune's AITuneUserInputError as
aitune_ray.errors.ConfigError (the error of a bad argument here, a ValueError)."""

import pytest
import torch

import aitune_ray as ait
from aitune_ray.errors import ConfigError

HELPERS = ("AITune's dynamic_shapes_to_json and validate_dynamic_shape_definitions are outside its module's "
           "__all__ and have no counterpart here; Module(dynamic_shapes=) validates the same definitions")


def test_public_dimension_types_and_default_opt():
    assert ait.DynamicDim("sequence", min=1, max=512).opt is None
    assert ait.BatchDim("batch", min=1, opt=8, max=32).opt == 8


@pytest.mark.parametrize(("dimension", "expected_type"), [
    (ait.DynamicDim("sequence", min=1, max=512), "DynamicDim"),
    (ait.BatchDim("batch", min=1, opt=8, max=32), "BatchDim"),
])
def test_dynamic_dimension_to_dict(dimension, expected_type):
    assert dimension.to_dict() == {"type": expected_type, "name": dimension.name, "min": dimension.min,
                                   "max": dimension.max, "opt": dimension.opt}


@pytest.mark.skip(reason=HELPERS)
def test_dynamic_shapes_to_json():
    """dynamic_shapes_to_json({"x": (BatchDim, 128), ("options", "mask"): (DynamicDim,)}) lists path and shape."""


@pytest.mark.skip(reason=HELPERS)
def test_dynamic_shapes_to_json_preserves_none():
    """dynamic_shapes_to_json(None) is None."""


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"name": "", "min": 1, "max": 2}, ConfigError, "non-empty string"),
    ({"name": "sequence", "min": 0, "max": 2}, ValueError, "must be a positive"),
    ({"name": "sequence", "min": 2, "max": 2}, ConfigError, "min < max"),
    ({"name": "sequence", "min": 1, "opt": 3, "max": 2}, ConfigError, "min <= opt <= max"),
])
def test_invalid_dynamic_dimensions_are_rejected(kwargs, error, message):
    with pytest.raises(error, match=message):
        ait.DynamicDim(**kwargs)


@pytest.mark.skip(reason=HELPERS)
def test_validate_dynamic_shape_definitions_accepts_valid_shared_dimensions():
    """validate_dynamic_shape_definitions accepts one dimension shared by two inputs."""


@pytest.mark.skip(reason=HELPERS)
def test_validate_dynamic_shape_definitions_rejects_invalid_input():
    """validate_dynamic_shape_definitions refuses a non-dict, a bad path, a list, -1, True, and clashes."""


def test_conflicting_dimension_names_are_rejected():
    with pytest.raises(ConfigError, match="conflicting definitions"):
        ait.Module(torch.nn.Identity(), dynamic_shapes={"x": (ait.DynamicDim("sequence", min=1, max=512),),
                                                        "y": (ait.DynamicDim("sequence", min=1, max=256),)})
