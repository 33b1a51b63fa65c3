"""AITune 0.6.0's unit tests of aitune.torch.inspecting.inspect (tests/unit/torch/inspecting/test_inspecting.py),
ported: the same models, datasets and assertions, `aitune.torch` read as `aitune_ray`."""

import pytest
import torch
from torch import nn

from aitune_ray.dataloader import DataLoaderFactory
from aitune_ray.inspecting import inspect
from aitune_ray.inspecting.module_info import InspectedModulesInfo, ModuleInfo
from aitune_ray.measure.timing import use_clock
from tests.aitune.models import Nested, ObjectWithAttributes, ObjectWithoutModules

ITERATIONS = 10


class Looping:
    """linear1 called num_iterations times per call, then relu and linear2 once."""

    def __init__(self):
        self.num_iterations = 4
        self.linear1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.linear2 = nn.Linear(10, 10)

    def __call__(self, x):
        for _ in range(self.num_iterations):
            x = self.linear1(x)
        return self.linear2(self.relu(x))


@pytest.fixture
def step_clock():
    """Every read of the clock 1 ms after the last: each call of a module takes the same time, so the order
    by time is the order by calls, whatever else the machine runs (AITune's tests read the real clock)."""
    ticks = iter(range(10 ** 9))
    with use_clock(lambda: next(ticks) / 1000):
        yield


@pytest.fixture
def sample_dataset():
    return torch.randn(10, 10)


def test_inspect_simple_model(simple_model, sample_dataset):
    info = inspect(simple_model, sample_dataset)
    assert isinstance(info, InspectedModulesInfo)
    modules = info.get_modules()
    assert len(modules) > 0 and all(isinstance(m, ModuleInfo) for m in modules)
    assert any(m.forward_called for m in modules)
    assert any(m.execution_count > 0 for m in modules)
    assert any(m.total_execution_time > 0 for m in modules)


def test_inspect_nested_model(sample_dataset):
    model = Nested()
    modules = inspect(model.linear, sample_dataset, number_of_iterations=ITERATIONS).get_modules()
    assert len(modules) > 0
    assert modules[0].module == model.linear
    assert modules[0].forward_called is True
    assert modules[0].execution_count == ITERATIONS


def test_inspect_nested_model_with_inference_function(sample_dataset):
    model = Nested()
    info = inspect(model, sample_dataset, inference_function=lambda x: model.forward(x),
                   number_of_iterations=ITERATIONS)
    assert isinstance(info, InspectedModulesInfo)
    modules = info.get_modules()
    assert len(modules) > 0
    assert modules[0].module == model
    assert modules[0].forward_called is True
    assert modules[0].execution_count == ITERATIONS


def test_inspect_with_dataloader(simple_model):
    modules = inspect(simple_model, DataLoaderFactory(dataset=torch.randn(10, 10))).get_modules()
    assert len(modules) > 0 and any(m.forward_called for m in modules)


def test_inspect_with_complex_output(sample_dataset):
    class ComplexOutput(nn.Module):
        def forward(self, x):
            return {"output1": x + 1, "output2": (x * 2, x * 3), "output3": [x, x + 1]}

    modules = inspect(ComplexOutput(), sample_dataset).get_modules()
    assert len(modules) > 0
    first = next(iter(modules))
    assert len(first.output_types) > 0 and first.output_types[0]["type"] == "dict"


@pytest.mark.gpu
def test_inspect_with_cuda(simple_model, sample_dataset):
    if not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    modules = inspect(simple_model.cuda(), sample_dataset.cuda()).get_modules()
    assert len(modules) > 0
    assert any(m.forward_called for m in modules) and any(m.total_execution_time > 0 for m in modules)


def test_inspect_with_mixed_precision(sample_dataset):
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1 = nn.Linear(10, 20).to(torch.float16)
            self.relu = nn.ReLU()
            self.linear2 = nn.Linear(20, 5).to(torch.float32)

        def forward(self, x):
            x = self.relu(self.linear1(x.to(torch.float16)))
            return self.linear2(x.to(torch.float32))

    modules = inspect(Mixed(), sample_dataset).get_modules()
    assert len(modules) > 0
    precisions = next(iter(modules)).precisions
    assert torch.float16 in precisions and torch.float32 in precisions


def test_inspect_with_invalid_input():
    with pytest.raises(TypeError):
        inspect(None, torch.randn(10, 10))


def test_inspect_with_multiple_forward_calls(simple_model, sample_dataset):
    first = next(iter(inspect(simple_model, sample_dataset).get_modules()))
    assert first.execution_count > 0 and first.total_execution_time > 0 and first.average_execution_time > 0


def test_inspect_with_custom_object(sample_dataset):
    class CustomObject:
        def __init__(self):
            self.model = nn.Sequential(nn.Linear(10, 20), nn.ReLU())
            self.extra_data = torch.randn(5, 5)

        def __call__(self, x):
            return self.model(x)

    modules = inspect(CustomObject(), sample_dataset).get_modules()
    assert len(modules) > 0 and any(m.forward_called for m in modules)


def test_inspect_with_custom_object_without_modules(sample_dataset):
    info = inspect(ObjectWithoutModules(), sample_dataset)
    assert isinstance(info, InspectedModulesInfo) and len(info.get_modules()) == 0


def test_inspect_with_custom_object_with_attributes(sample_dataset):
    modules = inspect(ObjectWithAttributes(), sample_dataset).get_modules()
    assert len(modules) > 0 and any(m.forward_called for m in modules)


def test_get_modules_after_inspection(sample_dataset, step_clock):
    obj = Looping()
    modules = inspect(obj, sample_dataset, number_of_iterations=ITERATIONS).get_modules()
    assert len(modules) == 3
    assert modules[0].name == "linear1"
    assert modules[0].execution_count == ITERATIONS * obj.num_iterations
    for later in modules[1:]:
        assert later.name in ["linear2", "relu"] and later.execution_count == ITERATIONS


def test_get_modules_with_min_execution_ratio():
    info = InspectedModulesInfo(total_execution_time=1.0, number_of_batches=1)
    for module, name, count, seconds in ((nn.Linear(10, 10), "linear1", ITERATIONS * 4, 0.3),
                                         (nn.ReLU(), "relu", ITERATIONS, 0.2),
                                         (nn.Linear(10, 10), "linear2", ITERATIONS, 0.1)):
        info.add_module(ModuleInfo(module=module, name=name, execution_count=count, total_execution_time=seconds,
                                   object_path=name))
    modules = info.get_modules(min_execution_ratio=0.25)
    assert len(modules) == 1
    assert modules[0].name == "linear1" and modules[0].execution_count == ITERATIONS * 4


@pytest.mark.parametrize("min_execution_ratio", [-0.01, 1.01])
def test_get_modules_rejects_invalid_min_execution_ratio(min_execution_ratio):
    info = InspectedModulesInfo(total_execution_time=1.0, number_of_batches=1)
    with pytest.raises(ValueError, match="value must be between 0 and 1"):
        info.get_modules(min_execution_ratio=min_execution_ratio)


def test_get_modules_after_inspection_with_limit(sample_dataset, step_clock):
    obj = Looping()
    modules = inspect(obj, sample_dataset, number_of_iterations=ITERATIONS).get_modules(limit=2)
    assert len(modules) == 2
    assert modules[0].name == "linear1" and modules[0].execution_count == ITERATIONS * obj.num_iterations
    assert modules[1].name in ["linear2", "relu"] and modules[1].execution_count == ITERATIONS
