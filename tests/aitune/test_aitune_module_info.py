"""AITune 0.6.0's unit tests of aitune.torch.inspecting.module_info (tests/unit/torch/inspecting/
test_module_info.py), ported: the same model and assertions, `aitune.torch` read as `aitune_ray`."""

import pytest
import torch

from aitune_ray.inspecting.module_info import ModuleInfo


@pytest.fixture
def module_info(simple_model):
    return ModuleInfo(name="test_module", module=simple_model, parent=None, forward_called=False,
                      execution_count=0, total_execution_time=0.0, output_types=[])


def test_module_type(module_info, simple_model):
    assert module_info.module_type is type(simple_model)


def test_average_execution_time(module_info):
    assert module_info.average_execution_time == pytest.approx(0.0)
    module_info.execution_count, module_info.total_execution_time = 2, 4.0
    assert module_info.average_execution_time == pytest.approx(2.0)


def test_num_layers(module_info):
    assert module_info.num_layers == 3          # Linear, ReLU, Linear


def test_num_parameters(module_info):
    assert module_info.num_parameters == 325    # 10 * 20 + 20, then 20 * 5 + 5


def test_precisions(module_info):
    precisions = module_info.precisions
    assert len(precisions) == 1 and torch.float32 in precisions


def test_execution_tracking(module_info):
    assert not module_info.forward_called
    assert module_info.execution_count == 0
    assert module_info.total_execution_time == pytest.approx(0.0)
    module_info.forward_called, module_info.execution_count, module_info.total_execution_time = True, 1, 1.5
    assert module_info.forward_called and module_info.execution_count == 1
    assert module_info.total_execution_time == pytest.approx(1.5)
    assert module_info.average_execution_time == pytest.approx(1.5)


def test_output_types(module_info):
    assert len(module_info.output_types) == 0
    module_info.output_types.append({"type": "Tensor", "shape": [1, 5]})
    assert module_info.output_types == [{"type": "Tensor", "shape": [1, 5]}]
