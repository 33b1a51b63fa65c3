"""ait.inspect and ait.wrap (AITune 0.6.0's aitune.torch.inspecting): modules found on a pipeline object,
their calls counted and timed on the simulated clock (so every share is exact), the chosen ones wrapped in
place, and tune() tuning those."""

from __future__ import annotations

import inspect as pyinspect

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.errors import ConfigError, DatasetError
from aitune_ray.executors.inline import InlineExecutor
from aitune_ray.inspecting import InspectedModulesInfo, ModuleInfo
from aitune_ray.measure import timing
from aitune_ray.api.module import Module
from aitune_ray.model.recording import ModuleState
from aitune_ray.testing import SIM_CALLS, SIM_CLOCK, SimAffine
from aitune_ray.testing.sim import sim

OUTSIDE_MS = 4.0   # what the pipeline spends outside its modules per call


class Pipe:
    """A pipeline object as AITune inspects one: modules in an attribute, a list, a dict and an nn.ModuleList;
    the encoder is called twice per call, one module is never called."""

    def __init__(self, noise: float = 0.0):
        self.encoder = SimAffine(ms=2.0, noise=noise, seed=1)
        self.blocks = [SimAffine(ms=1.0, noise=noise, seed=2), SimAffine(ms=1.0, noise=noise, seed=3)]
        self.heads = {"main": SimAffine(ms=3.0, noise=noise, seed=4)}
        self.stack = nn.ModuleList([SimAffine(ms=0.5, noise=noise, seed=5)])
        self.unused = SimAffine(ms=9.0)
        self.scale = 0.5

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        SIM_CLOCK.sleep(OUTSIDE_MS / 1e3)
        x = self.encoder(self.encoder(x))
        for block in self.blocks:
            x = block(x)
        return self.stack[0](self.heads["main"](x)) * self.scale



def dataset(n: int = 3) -> list[torch.Tensor]:
    return [torch.full((4,), float(i)) for i in range(n)]


def test_inspect_finds_modules_in_attributes_lists_and_dicts_and_their_shares_add_up(sim_clock, capsys):
    pipe = Pipe()
    info = ait.inspect(pipe, dataset(), number_of_iterations=10, warmup_iterations=3)
    found = {m.object_path: m for m in info.get_modules()}
    assert list(found) == [".encoder", ".blocks.0", ".blocks.1", ".heads.main", ".stack.0"]
    assert [m.name for m in found.values()] == ["encoder", "0", "1", "main", "0"]
    assert {path: m.execution_count for path, m in found.items()} == {
        ".encoder": 20, ".blocks.0": 10, ".blocks.1": 10, ".heads.main": 10, ".stack.0": 10}
    per_call_ms = OUTSIDE_MS + 2 * 2.0 + 1.0 + 1.0 + 3.0 + 0.5
    assert info.total_execution_time == pytest.approx(10 * per_call_ms / 1e3)
    assert info.number_of_batches == 10
    shares = {path: info.share(m) for path, m in found.items()}
    assert shares[".encoder"] == pytest.approx(4.0 / per_call_ms) and shares[".stack.0"] == pytest.approx(0.5 / per_call_ms)
    assert sum(shares.values()) + OUTSIDE_MS / per_call_ms == pytest.approx(1.0)
    assert found[".encoder"].average_execution_time == pytest.approx(2e-3)
    assert found[".encoder"].input_types[0] == {"args": ["Tensor"], "kwargs": {}}
    assert found[".stack.0"].parent.module is pipe.stack   # the ModuleList holds it (its own forward never ran)
    assert info.describe() is None
    table = capsys.readouterr().out   # describe() prints the table, as AITune's does
    assert table.strip() == info.table().strip()
    assert "heads.main" in table and f"{3.0 / per_call_ms * 100:.1f}%" in table
    assert f"{OUTSIDE_MS / per_call_ms * 100:.1f}%" in table and "over 10 iterations" in table
    assert all("forward" not in vars(m) for m in (pipe.encoder, pipe.unused, pipe.stack, pipe.stack[0]))


def test_get_modules_filters_by_share_and_limit_slowest_first(sim_clock):
    info = ait.inspect(Pipe(), dataset(), number_of_iterations=2, warmup_iterations=0)
    assert [m.object_path for m in info.get_modules(min_execution_ratio=0.2)] == [".encoder", ".heads.main"]
    assert [m.object_path for m in info.get_modules(limit=3)] == [".encoder", ".heads.main", ".blocks.0"]
    assert info.get_modules(min_execution_ratio=1.0) == [] and info.get_modules(limit=0) == []
    with pytest.raises(ConfigError, match="min_execution_ratio"):
        info.get_modules(min_execution_ratio=1.5)
    with pytest.raises(ConfigError, match="already listed"):
        info.add_module(info.get_modules()[0])


class Shapes(nn.Module):
    """Keeps every input it is called with."""

    def __init__(self):
        super().__init__()
        self.seen: list = []

    def forward(self, x, scale=None):
        self.seen.append((x.clone(), None if scale is None else scale.clone()))
        return x


def test_the_dataset_is_batched_as_tune_batches_it_and_the_warm_up_is_not_counted(sim_clock):
    model = Shapes()
    info = ait.inspect(model, dataset(3), number_of_iterations=4, warmup_iterations=2)
    (only,) = info.get_modules()
    assert only.execution_count == 4 and only.parent is None and only.object_path == ""
    assert [tuple(x.shape) for x, _ in model.seen] == [(1, 4)] * 6            # batches of one sample
    assert [x[0, 0].item() for x, _ in model.seen] == [0, 1, 0, 1, 2, 0]      # cycled from the start
    model.seen.clear()
    ait.inspect(model, [{"x": torch.ones(2), "scale": torch.tensor(3.0)}], number_of_iterations=1,
                warmup_iterations=0)
    ((x, scale),) = model.seen
    assert x.shape == (1, 2) and scale.shape == (1,)                          # keyword items, as tune()
    model.seen.clear()
    ait.inspect(model, [(torch.ones(2, 5),)], number_of_iterations=1, warmup_iterations=0, call_as_given=True)
    assert model.seen[0][0].shape == (2, 5)


def test_the_outermost_called_modules_are_reported_and_min_depth_looks_inside(sim_clock):
    model = nn.Sequential(SimAffine(ms=1.0, noise=0.0), SimAffine(ms=3.0, noise=0.0))
    (whole,) = ait.inspect(model, dataset(), number_of_iterations=2, warmup_iterations=0).get_modules()
    assert whole.module is model and whole.name == "Sequential" and whole.execution_count == 2
    inside = ait.inspect(model, dataset(), number_of_iterations=2, warmup_iterations=0, min_depth=1)
    assert [(m.object_path, m.name) for m in inside.get_modules()] == [(".0", "0"), (".1", "1")]
    assert [inside.share(m) for m in inside.get_modules()] == pytest.approx([0.25, 0.75])
    shallow = ait.inspect(Pipe(), dataset(), number_of_iterations=1, warmup_iterations=0, max_depth=1)
    assert [m.object_path for m in shallow.get_modules()] == [".encoder"]   # items of lists and dicts are deeper


def test_every_forward_is_put_back_when_the_function_fails_and_an_own_forward_is_kept(sim_clock):
    pipe = Pipe()
    own = pipe.encoder.forward
    pipe.encoder.forward = own   # an instance attribute of the user's own, kept as it was

    def fails(x):
        pipe.encoder(x)
        raise RuntimeError("boom")

    with pytest.raises(DatasetError, match="inspect: batch 0 .* could not be passed to fails: RuntimeError: boom"):
        ait.inspect(pipe, dataset(), inference_function=fails)
    assert vars(pipe.encoder)["forward"] is own and "forward" not in vars(pipe.heads["main"])


@pytest.mark.parametrize("kwargs,words", [({"number_of_iterations": 0}, "number_of_iterations"),
                                          ({"warmup_iterations": -1}, "warmup_iterations"),
                                          ({"min_depth": 3, "max_depth": 2}, "min_depth 3 is above max_depth 2")])
def test_bad_arguments_fail_at_once(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        ait.inspect(Pipe(), dataset(), **kwargs)


def test_wrap_wraps_exactly_the_chosen_modules_where_they_stand_and_the_pipeline_still_runs(sim_clock):
    pipe = Pipe()
    x = torch.randn(2, 4)
    expected = pipe(x)
    info = ait.inspect(pipe, dataset())
    chosen = info.get_modules(min_execution_ratio=0.2) + [m for m in info.get_modules() if m.object_path == ".stack.0"]
    strategy = ait.OneBackendStrategy(ait.backend.TorchEagerBackend())
    assert ait.wrap(pipe, chosen, strategy=strategy) is pipe
    wrapped = {"encoder": pipe.encoder, "main": pipe.heads["main"], "0": pipe.stack[0]}
    assert all(type(m) is Module and m.name == name and m.strategy is strategy for name, m in wrapped.items())
    assert type(pipe.blocks[0]) is SimAffine and type(pipe.blocks[1]) is SimAffine and type(pipe.unused) is SimAffine
    assert type(pipe.stack) is nn.ModuleList and list(pipe.stack.state_dict()) == []
    assert torch.equal(pipe(x), expected)
    with pytest.raises(ConfigError, match="wrap: .encoder no longer holds the module inspect\\(\\) found there"):
        ait.wrap(pipe, chosen)


def test_wrap_of_a_list_and_a_dict_item_inside_a_module():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
            self.extra = {"tail": nn.Linear(2, 2)}   # a plain dict on a module

        def forward(self, x):
            return self.extra["tail"](self.layers[1](self.layers[0](x)))

    holder = Holder()
    info = ait.inspect(holder, [torch.randn(2)], number_of_iterations=1, warmup_iterations=0, min_depth=2)
    assert [m.object_path for m in info.get_modules()] == [".layers.0", ".layers.1", ".extra.tail"]
    ait.wrap(holder, [m for m in info.get_modules() if m.name in ("1", "tail")])
    assert type(holder.layers[1]) is Module and type(holder.extra["tail"]) is Module
    assert type(holder.layers[0]) is nn.Linear and holder(torch.randn(3, 2)).shape == (3, 2)


def test_wrap_of_a_pipeline_that_is_one_module_returns_its_wrapper(sim_clock):
    model = nn.Sequential(SimAffine(ms=1.0, noise=0.0))
    info = ait.inspect(model, dataset(), number_of_iterations=1, warmup_iterations=0)
    wrapped = ait.wrap(model, info.get_modules())
    assert type(wrapped) is Module and wrapped.module is model and wrapped.name == "Sequential"
    with pytest.raises(ConfigError, match="get_modules"):
        ait.wrap(model, ["0"])


def test_tune_then_tunes_the_wrapped_modules_and_only_those(sim_clock):
    pipe = Pipe(noise=0.02)
    data = dataset(4)
    info = ait.inspect(pipe, data)
    quick = sim("quick", ms=0.5, noise=0.02, seed=9)
    measure = timing.MeasureConfig(warmup_runs=1, min_runs=5, max_runs=10, max_seconds=5.0, latency_runs=3)
    ait.wrap(pipe, info.get_modules(min_execution_ratio=0.2), strategy=ait.FirstWinsStrategy([quick],
                                                                                             measure_config=measure))
    report = ait.tune(pipe, data, batch_sizes=[1, 2], device="cpu", executor=InlineExecutor(remeasure_rounds=10))
    assert sorted(m.module for m in report.modules) == ["encoder", "main"]
    assert pipe.encoder.state == ModuleState.TUNED and pipe.heads["main"].state == ModuleState.TUNED
    assert all(m.chosen == quick.key() for m in report.modules), [m.decision for m in report.modules]
    before = SIM_CALLS["infer:quick:2"]
    assert torch.allclose(pipe(torch.ones(2, 4)), Pipe()(torch.ones(2, 4)))
    assert SIM_CALLS["infer:quick:2"] == before + 3   # the encoder twice and the head once, on the chosen backend


def test_signatures_are_aitunes():
    def params(func):
        return [(p.name, p.default) for p in pyinspect.signature(func).parameters.values()]

    assert params(ait.inspect)[:7] == [("obj", pyinspect.Parameter.empty), ("dataset", pyinspect.Parameter.empty),
                                       ("inference_function", None), ("number_of_iterations", 10),
                                       ("warmup_iterations", 5), ("min_depth", 0), ("max_depth", 5)]
    assert params(ait.wrap) == [("obj", pyinspect.Parameter.empty), ("modules", pyinspect.Parameter.empty),
                                ("strategy", None), ("strategies", None)]
    assert {f.name for f in __import__("dataclasses").fields(ModuleInfo)} == {
        "module", "name", "parent", "forward_called", "execution_count", "total_execution_time", "input_types",
        "output_types", "object_path", "depth"}
    assert callable(InspectedModulesInfo.describe) and callable(InspectedModulesInfo.get_modules)
