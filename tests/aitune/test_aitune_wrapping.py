"""AITune 0.6.0's unit tests of aitune.torch.inspecting.wrapping (tests/unit/torch/inspecting/test_wrapping.py),
ported: the same models and assertions, `aitune.torch` read as `aitune_ray`; AITune's private `_self_name` and
`_self_strategy` are read as the wrapper's `name` and `strategy`. A module here is tuned as one graph on every
recorded shape, so strategies= takes a list of one strategy: AITune's tests of several strategies, as a list or
a map by input signature, check here that they are refused naming strategy= (docs/aitune.md, Module)."""

import pytest
import torch
from torch import nn

from aitune_ray.backend import TensorRTBackend, TorchInductorJitBackend
from aitune_ray.errors import ConfigError
from aitune_ray.inspecting.module_info import DictOfModulesInfo, ListOfModulesInfo, ModuleInfo
from aitune_ray.inspecting.wrapping import wrap
from aitune_ray.module.wrapper_module import Module
from aitune_ray.tune_strategy import FirstWinsStrategy, OneBackendStrategy
from tests.aitune.models import Nested, ObjectWithAttributes, ObjectWithoutModules

def strategy():
    return FirstWinsStrategy(backends=[TorchInductorJitBackend(), TensorRTBackend()])


def wrap_attributes(obj, *names: str, **kwargs):
    """wrap(obj, ...) given each named attribute of obj as a module whose parent is obj (AITune's tests spell
    that ModuleInfo list out in each test)."""
    parent = ModuleInfo(module=obj)
    return wrap(obj, [ModuleInfo(name=name, module=getattr(obj, name), parent=parent) for name in names], **kwargs)


def test_wrap_root_module(simple_model):
    wrapped = wrap(simple_model, [ModuleInfo(module=simple_model)])
    assert isinstance(wrapped, Module)
    assert wrapped.name == "Sequential"


def test_wrap_submodule():
    model = Nested(in_features=5)
    wrapped = wrap_attributes(model, "linear")
    assert not isinstance(wrapped, Module)
    assert isinstance(wrapped.linear, Module) and wrapped.linear.name == "linear"
    assert wrapped is model


def test_wrap_multiple_modules():
    model = Nested(in_features=5)
    wrapped = wrap_attributes(model, "linear", "relu")
    assert isinstance(model.linear, Module) and isinstance(model.relu, Module)
    assert (model.linear.name, model.relu.name) == ("linear", "relu")
    assert wrapped is model


def test_wrap_with_strategy(simple_model):
    chosen = strategy()
    wrapped = wrap(simple_model, [ModuleInfo(module=simple_model)], strategy=chosen)
    assert isinstance(wrapped, Module)
    assert wrapped.strategy.__class__ == chosen.__class__


def test_wrap_with_strategies_list(simple_model):
    with pytest.raises(ConfigError, match="strategy="):
        wrap(simple_model, [ModuleInfo(module=simple_model)],
             strategies=[strategy(), OneBackendStrategy(backend=TorchInductorJitBackend())])
    wrapped = wrap(simple_model, [ModuleInfo(module=simple_model)], strategies=[strategy()])   # a list of one
    assert isinstance(wrapped, Module) and isinstance(wrapped.strategy, FirstWinsStrategy)


def test_wrap_with_strategies_map(simple_model):
    """AITune's test keys two strategies by its model's input metadata."""
    with pytest.raises(ConfigError, match="strategy="):
        wrap(simple_model, [ModuleInfo(module=simple_model)],
             strategies={"x": strategy(), "y": OneBackendStrategy(backend=TorchInductorJitBackend())})


def test_wrap_empty_modules_list(simple_model):
    wrapped = wrap(simple_model, [])
    assert not isinstance(wrapped, Module) and wrapped is simple_model


def test_wrap_module_execution(simple_model):
    wrapped = wrap(simple_model, [ModuleInfo(module=simple_model)])
    assert wrapped(torch.randn(1, 10)).shape == (1, 5)


def test_wrap_module_state_preservation(simple_model):
    simple_model[0].weight.data.fill_(1.0)
    original = simple_model[0].weight.clone()
    wrapped = wrap(simple_model, [ModuleInfo(module=simple_model)])
    assert torch.allclose(wrapped[0].weight, original)


def test_wrap_custom_object():
    class CustomObject:
        def __init__(self):
            self.model = nn.Sequential(nn.Linear(10, 20), nn.ReLU())

        def __call__(self, x):
            return self.model(x)

    wrapped = wrap_attributes(CustomObject(), "model", strategy=strategy())
    assert isinstance(wrapped, CustomObject) and isinstance(wrapped.model, Module)


def test_wrap_custom_object_nested():
    class CustomLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(10, 20)

        def forward(self, x):
            return self.linear(x)

    class CustomObject:
        def __init__(self):
            self.layer = CustomLayer()

        def __call__(self, x):
            return self.layer(x)

    wrapped = wrap_attributes(CustomObject(), "layer", strategy=strategy())
    assert isinstance(wrapped, CustomObject) and isinstance(wrapped.layer, Module)


def test_wrap_custom_object_multiple_modules():
    class CustomObject:
        def __init__(self):
            self.model1 = nn.Linear(10, 20)
            self.model2 = nn.Linear(20, 5)

        def __call__(self, x):
            return self.model2(self.model1(x))

    wrapped = wrap_attributes(CustomObject(), "model1", "model2", strategy=strategy())
    assert isinstance(wrapped, CustomObject)
    assert isinstance(wrapped.model1, Module) and isinstance(wrapped.model2, Module)


def test_wrap_custom_object_without_modules():
    wrapped = wrap(ObjectWithoutModules(), [], strategy=strategy())
    assert isinstance(wrapped, ObjectWithoutModules) and not isinstance(wrapped.data, Module)


def test_wrap_custom_object_with_attributes():
    wrapped = wrap_attributes(ObjectWithAttributes(), "model", strategy=strategy())
    assert isinstance(wrapped, ObjectWithAttributes) and isinstance(wrapped.model, Module)
    assert not any(isinstance(v, Module) for v in (wrapped.data, wrapped.list_data, wrapped.dict_data))


def test_wrap_module_in_list():
    model = [nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)]
    wrapped = wrap(model, [ModuleInfo(name="0", module=model[0], parent=ListOfModulesInfo(module=model))])
    assert not isinstance(wrapped, Module)
    assert [isinstance(m, Module) for m in wrapped] == [True, False, False]


def test_wrap_module_in_dict():
    model = {"linear": nn.Linear(10, 20), "relu": nn.ReLU(), "linear2": nn.Linear(20, 5)}
    wrapped = wrap(model, [ModuleInfo(name="linear", module=model["linear"], parent=DictOfModulesInfo(module=model))])
    assert not isinstance(wrapped, Module)
    assert {k: isinstance(m, Module) for k, m in wrapped.items()} == {"linear": True, "relu": False,
                                                                       "linear2": False}


def test_wrap_nested_diffrent_types():
    class NestedDifferentModules(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(10, 20)
            self.dict = {"linear": nn.Linear(10, 20)}
            self.list = [nn.Linear(10, 20)]

    model = NestedDifferentModules()
    parent = ModuleInfo(module=model)
    wrapped = wrap(model, [
        ModuleInfo(name="linear", module=model.linear, parent=parent),
        ModuleInfo(name="linear", module=model.dict["linear"], parent=DictOfModulesInfo(module=model.dict,
                                                                                         parent=parent)),
        ModuleInfo(name="0", module=model.list[0], parent=ListOfModulesInfo(module=model.list, parent=parent)),
    ])
    assert not isinstance(wrapped, Module)
    assert isinstance(wrapped.linear, Module)
    assert isinstance(wrapped.dict["linear"], Module) and isinstance(wrapped.list[0], Module)
