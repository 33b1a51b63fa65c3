"""Forward hooks, as AITune runs them: taken off the module while a backend builds (an ONNX Runtime graph never
holds an output hook) and run around the chosen backend on every call, pre-hooks and hooks, once each, whether
the wrapper or the original object is called; their handles keep working."""

import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import ONNXRuntimeBackend
from tests.helpers import FAST_MEASURE, fresh_counters  # noqa: F401


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x)


def test_hooks_run_around_the_onnx_runtime_backend_and_are_not_baked_into_its_graph():
    model = Small()
    calls = {"pre": 0, "post": 0}

    def double_input(module, args):
        calls["pre"] += 1
        return (args[0] * 2,)

    def add_hundred(module, args, output):
        calls["post"] += 1
        return output + 100

    model.register_forward_pre_hook(double_input)
    post = model.register_forward_hook(add_hundred)
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), measure_config=FAST_MEASURE)
    wrapper = ait.Module(model, name="small", strategy=strategy.enable_performance_validation(
        ait.PerformanceValidationMode.DISABLED))
    x = torch.randn(2, 4)
    with torch.no_grad():
        plain = model.linear(x * 2)

    assert torch.allclose(wrapper(x), plain + 100, atol=1e-5)
    assert calls == {"pre": 1, "post": 1}
    sample = wrapper.samples.samples[0]      # recorded inside the hooks: the hooked input, the module's own output
    assert torch.equal(sample.args[0], x * 2) and torch.allclose(sample.outputs, plain, atol=1e-6)

    wrapper.tune(device="cpu")
    assert wrapper.state == ait.ModuleState.TUNED and type(wrapper.backend) is ONNXRuntimeBackend
    calls.update(pre=0, post=0)
    with torch.no_grad():
        assert torch.allclose(wrapper(x), plain + 100, atol=1e-4)   # +100 once: not in the graph, run around it
        assert torch.allclose(model(x), plain + 100, atol=1e-4)     # the original object alike
    assert calls == {"pre": 2, "post": 2}

    post.remove()                             # a handle taken before wrapping still removes its hook
    with torch.no_grad():
        assert torch.allclose(model(x), plain, atol=1e-4)
    assert calls["post"] == 2


def test_hooks_run_once_around_a_recording_and_an_eager_call():
    model = Small()
    seen = []
    model.register_forward_hook(lambda module, args, output: seen.append(module) or None)
    wrapper = ait.Module(model, name="small")
    wrapper(torch.randn(1, 4))
    model(torch.randn(1, 4))
    assert seen == [model, model] and len(wrapper.samples) == 2
    wrapper.enable_passthrough()
    wrapper(torch.randn(1, 4))
    assert len(seen) == 3
