"""AITune 0.6.0's unit tests of aitune.torch.dynamic_shapes (tests/unit/torch/test_dynamic_shapes.py), ported:
the same dimensions and assertions, `aitune.torch` read as `aitune_ray` and AITune's AITuneUserInputError as
aitune_ray.errors.ConfigError (the error of a bad argument here, a ValueError). AITune's dynamic_shapes_to_json
and validate_dynamic_shape_definitions are outside its module's __all__ and have no counterpart here: the tests
of the first are not ported, those of the second check the same definitions through Module(dynamic_shapes=),
which validates them before refusing dynamic shapes (a backend here takes the recorded shapes)."""

import pytest
import torch

import aitune_ray as ait
from aitune_ray.errors import ConfigError

SEQUENCE = ait.DynamicDim("sequence", min=1, max=512)
VALID_BUT_REFUSED = "dynamic_shapes is not supported"   # Module's words once the definitions are valid


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


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"name": "", "min": 1, "max": 2}, ConfigError, "non-empty string"),
    ({"name": "sequence", "min": 0, "max": 2}, ValueError, "must be a positive"),
    ({"name": "sequence", "min": 2, "max": 2}, ConfigError, "min < max"),
    ({"name": "sequence", "min": 1, "opt": 3, "max": 2}, ConfigError, "min <= opt <= max"),
])
def test_invalid_dynamic_dimensions_are_rejected(kwargs, error, message):
    with pytest.raises(error, match=message):
        ait.DynamicDim(**kwargs)


def test_validate_dynamic_shape_definitions_accepts_valid_shared_dimensions():
    with pytest.raises(ConfigError, match=VALID_BUT_REFUSED):
        ait.Module(torch.nn.Identity(), dynamic_shapes={"x": (ait.BatchDim("batch", min=1, max=8), SEQUENCE),
                                                        ("options", "mask"): (SEQUENCE,)})


@pytest.mark.parametrize(("dynamic_shapes", "message"), [
    ([SEQUENCE], "must be a dict"),
    ({"x": [SEQUENCE]}, "must be a tuple"),
    ({"x": (-1,)}, "must be a size or a DynamicDim"),
    ({"x": (True,)}, "must be a size or a DynamicDim"),
])
def test_validate_dynamic_shape_definitions_rejects_invalid_input(dynamic_shapes, message):
    """AITune's cases but its bad input path, which this validation does not look at (dynamic shapes are
    refused whatever the paths); its clash is test_conflicting_dimension_names_are_rejected."""
    with pytest.raises(ConfigError, match=message):
        ait.Module(torch.nn.Identity(), dynamic_shapes=dynamic_shapes)


def test_conflicting_dimension_names_are_rejected():
    with pytest.raises(ConfigError, match="conflicting definitions"):
        ait.Module(torch.nn.Identity(), dynamic_shapes={"x": (ait.DynamicDim("sequence", min=1, max=512),),
                                                        "y": (ait.DynamicDim("sequence", min=1, max=256),)})
