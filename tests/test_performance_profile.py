"""ait.profile and ait.PerformanceProfile (AITune 0.6.0's aitune.torch.performance): the input as AITune passes
it, the run counts, wall times on the simulated clock (exact), the Chrome trace, the time split between tuned
aitune_ray.Module wrappers, untuned modules and the residual, the rendering and the dict round trip. Profiler
times are the host's real ones: only their structure is asserted, never a threshold."""

from __future__ import annotations

import inspect as pyinspect
import json
from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.errors import ConfigError
from aitune_ray.executors.inline import InlineExecutor
from aitune_ray.model.recording import ModuleState
from aitune_ray.performance.regions import LABELS, RUN_LABEL, TUNED, UNTUNED
from aitune_ray.testing import SIM_CALLS, SIM_CLOCK, SimAffine
from aitune_ray.testing.sim import sim

OUTSIDE_MS = 0.25   # what Pipe spends outside its modules per call


class Head(nn.Module):
    """An untuned module that the pipeline enters through a method of its own, which calls forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SIM_CLOCK.sleep(1e-3)
        return self.lin(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return self(x) + 1


class Pipe:
    """A pipeline object: a wrapped encoder (tuned in the tests that need it), an untuned head entered by
    decode(), an untuned post step called by forward, an alias of it, and a module never called."""

    def __init__(self):
        self.encoder = ait.Module(SimAffine(ms=2.0, noise=0.0), name="encoder",
                                  strategy=ait.OneBackendStrategy(sim("fast", ms=0.5, noise=0.0)))
        self.head = Head()
        self.post = SimAffine(ms=0.75, noise=0.0)
        self.post_alias = self.post
        self.unused = SimAffine(ms=9.0)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        SIM_CLOCK.sleep(OUTSIDE_MS / 1e3)
        return self.post(self.head.decode(self.encoder(x)))


def tuned_pipe() -> Pipe:
    pipe = Pipe()
    ait.tune(pipe, [torch.randn(4) for _ in range(2)], batch_sizes=[1], device="cpu",
             executor=InlineExecutor(remeasure_rounds=10))
    assert pipe.encoder.state == ModuleState.TUNED
    return pipe


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls: list[tuple[tuple, dict]] = []

    def forward(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return torch.zeros(1)


# ----- the input, the arguments and the runs -------------------------------------------------------------
@pytest.mark.parametrize("given, args, kwargs", [
    ({"x": 1, "mask": 2}, (), {"x": 1, "mask": 2}),
    ((1, 2, 3), (1, 2, 3), {}),
    (None, (), {}),
    ([1, 2], ([1, 2],), {}),
    (7, (7,), {}),
])
def test_the_input_is_passed_as_aitune_passes_it(given, args, kwargs):
    model = Recorder()
    result = ait.profile(model, given, warmup_runs=0, measured_runs=1)
    assert model.calls == [(args, kwargs)] * 2   # the profiler's own warm-up call, then the measured one
    assert result.data["input"] == {"args_count": len(args), "kwargs": sorted(kwargs)}


def test_inference_function_is_called_and_obj_is_searched():
    model = Recorder()
    seen = []
    result = ait.profile(model, {"a": 1}, inference_function=lambda **kw: seen.append(kw),
                         warmup_runs=1, measured_runs=2)
    assert seen == [{"a": 1}] * 4 and model.calls == []
    assert result.data["config"] == {"warmup_runs": 1, "measured_runs": 2, "uses_inference_function": True}
    assert result.data["target"] == {"type": f"{__name__}.Recorder"}


@pytest.mark.parametrize("keyword, value", [("warmup_runs", -1), ("measured_runs", 0), ("measured_runs", 2.0),
                                            ("warmup_runs", True)])
def test_bad_run_counts_are_refused_before_any_call(keyword, value):
    model = Recorder()
    with pytest.raises(ConfigError, match=f"profile: {keyword} must be an integer of at least"):
        ait.profile(model, None, **{keyword: value})
    with pytest.raises(ValueError):   # AITune raises ValueError: ConfigError is one
        ait.profile(model, None, **{keyword: value})
    assert model.calls == []


def test_a_target_that_cannot_be_called_is_refused():
    with pytest.raises(ConfigError, match="not callable; pass inference_function"):
        ait.profile(object(), None)


def test_measured_runs_are_timed_on_the_clock_in_use(sim_clock):
    model = SimAffine(ms=2.0, noise=0.0)
    before = SIM_CALLS["infer:eager:1"]
    result = ait.profile(model, torch.ones(1, 4), warmup_runs=2, measured_runs=5)
    assert SIM_CALLS["infer:eager:1"] - before == 2 + 1 + 5
    runs = result.data["runs"]
    assert [run["run_index"] for run in runs] == [0, 1, 2, 3, 4]
    assert [run["timing"]["wall_time_us"] for run in runs] == pytest.approx([2000.0] * 5)
    assert all(run["timing"]["cpu_time_us"] > 0 and "device_time_us" not in run["timing"] for run in runs)
    assert result.data["profiler"]["activities"] == ["CPU"]


def test_the_trace_file_is_a_chrome_trace_with_the_runs_and_regions(tmp_path):
    pipe = Pipe()
    trace = tmp_path / "deeper" / "trace.json"
    result = ait.profile(pipe, torch.ones(1, 4), warmup_runs=0, measured_runs=2, trace_file=str(trace))
    assert result.trace_file == trace.resolve() and result.to_dict()["trace_file"] == str(trace.resolve())
    names = [event.get("name") for event in json.loads(trace.read_text())["traceEvents"]]
    assert names.count(RUN_LABEL) == 2
    assert names.count(LABELS[TUNED] + "encoder") == 2 and names.count(LABELS[UNTUNED] + "head.decode") == 2
    assert ait.profile(pipe, torch.ones(1, 4), measured_runs=1).trace_file is None


# ----- regions ------------------------------------------------------------------------------------------
def test_a_tuned_module_and_the_untuned_ones_get_regions_and_split_each_run(sim_clock):
    pipe = tuned_pipe()
    before = SIM_CALLS["infer:fast:1"]
    result = ait.profile(pipe, torch.ones(1, 4), warmup_runs=1, measured_runs=3)
    assert SIM_CALLS["infer:fast:1"] - before == 1 + 1 + 3   # the chosen backend ran every call
    assert result.data["regions"] == [
        {"id": "aot_module:encoder", "name": "encoder", "kind": "aot_managed_module",
         "module_type": "aitune_ray.testing.sim.SimAffine", "wrapper_state": "tuned"},
        {"id": "untuned_module:head.decode", "name": "head.decode", "kind": "untuned_module",
         "module_type": f"{__name__}.Head"},
        {"id": "untuned_module:post", "name": "post", "kind": "untuned_module",
         "module_type": "aitune_ray.testing.sim.SimAffine"}]
    for run in result.data["runs"]:
        # backend 0.5 ms + head 1 ms + post 0.75 ms + the pipeline's own 0.25 ms, on the simulated clock
        assert run["timing"]["wall_time_us"] == pytest.approx(2500.0)
        regions = {r["region_id"]: r for r in run["regions"]}
        assert list(regions) == ["aot_module:encoder", "untuned_module:head.decode", "untuned_module:post"]
        # decode() calls forward on the same module: one span, one call
        assert all(r["calls"] == 1 for r in regions.values())
        cpu = run["timing"]["cpu_time_us"]
        assert all(r["cpu_time_fraction"] == pytest.approx(r["cpu_time_us"] / cpu) for r in regions.values())
        residual = run["residual"]
        assert sum(r["cpu_time_us"] for r in regions.values()) + residual["cpu_time_us"] == pytest.approx(cpu)
        assert 0.0 <= residual["cpu_time_fraction"] <= 1.0
    assert result.data["warnings"] == []


def test_regions_inside_module_trees_and_containers_and_spans_removed_after(sim_clock):
    head = Head()
    inner = SimAffine(ms=1.0, noise=0.0)
    model = nn.Sequential(nn.Sequential(ait.Module(inner, name="inner"), nn.Identity()),
                          nn.ModuleList([SimAffine(ms=0.5, noise=0.0)]), head)

    def run(x):
        x = model[0](x)
        x = model[1][0](x)
        return head.decode(x)

    result = ait.profile(model, torch.ones(1, 4), inference_function=run, warmup_runs=0, measured_runs=2)
    assert [(r["id"], r.get("wrapper_state")) for r in result.data["regions"]] == [
        ("aot_module:inner", "recording"), ("untuned_module:0.1", None), ("untuned_module:1.0", None),
        ("untuned_module:2.decode", None)]
    assert [r["region_id"] for r in result.data["runs"][0]["regions"]] == [r["id"] for r in result.data["regions"]]
    assert result.data["runs"][0]["timing"]["wall_time_us"] == pytest.approx(2500.0)
    assert "decode" not in vars(head) and not head._forward_pre_hooks and not head._forward_hooks
    assert not model[0][0]._forward_pre_hooks


def test_a_region_entered_inside_another_is_not_counted_twice(sim_clock):
    post = SimAffine(ms=0.5, noise=0.0)

    class Outer(nn.Module):
        def generate(self, x):
            return post(x)   # a sibling region, entered inside this one's span

    class Holder:
        def __init__(self):
            self.outer, self.post = Outer(), post

        def __call__(self, x):
            return self.outer.generate(x)

    result = ait.profile(Holder(), torch.ones(1, 4), warmup_runs=0, measured_runs=2)
    assert [r["id"] for r in result.data["regions"]] == ["untuned_module:outer.generate"]
    for run in result.data["runs"]:
        (region,) = run["regions"]
        assert region["calls"] == 1
        assert region["cpu_time_us"] + run["residual"]["cpu_time_us"] == pytest.approx(run["timing"]["cpu_time_us"])


def test_a_failing_call_leaves_no_span_or_hook_behind():
    head = Head()

    class Broken:
        def __init__(self):
            self.head = head

        def __call__(self, x):
            self.head.decode(x)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        ait.profile(Broken(), torch.ones(1, 4))
    assert "decode" not in vars(head) and not head._forward_pre_hooks and not head._forward_hooks


def test_a_wrapper_not_reachable_from_obj_is_named_in_a_warning(sim_clock, caplog):
    hidden = ait.Module(SimAffine(ms=1.0, noise=0.0), name="hidden")
    result = ait.profile(Recorder(), torch.ones(1, 4), inference_function=lambda x: hidden(x), measured_runs=1)
    assert result.data["regions"] == []
    (warning,) = result.data["warnings"]
    assert warning["code"] == "UNATTRIBUTED_MODULE" and "hidden" in warning["message"]
    assert "hidden" in caplog.text
    assert "No module region ran." in result.markdown()


# ----- rendering and round trip -------------------------------------------------------------------------
def test_the_markdown_holds_the_key_figures(sim_clock):
    result = ait.profile(tuned_pipe(), torch.ones(1, 4), warmup_runs=1, measured_runs=2)
    text = result.markdown()
    assert str(result) == text
    for needle in ("# Performance Profile", "| Warmup runs | 1 |", "| Measured runs | 2 |",
                   "| Wall time per run (median, min, max) | 2.500 ms, 2.500 ms, 2.500 ms |",
                   "| 0 | 2.500 ms |", "| 1 | 2.500 ms |", "## Regions",
                   "| `aot_module:encoder` | encoder | aot_managed_module | tuned | `aitune_ray.testing.sim.SimAffine` |",
                   "`untuned_module:head.decode`", "(residual)", "## Profiler key averages", f"`{RUN_LABEL}`",
                   "## Warnings\n\nNo warnings."):
        assert needle in text, needle
    first = result.data["runs"][0]["regions"][0]
    assert f"| 0 | `aot_module:encoder` | 1 | {first['cpu_time_us'] / 1e3:.3f} ms |" in text
    with pytest.raises(ConfigError, match="options are not supported"):
        result.markdown(options={})


def test_the_dict_round_trip_keeps_the_profile_and_its_rendering(tmp_path):
    result = ait.profile(Pipe(), torch.ones(1, 4), measured_runs=2, trace_file=tmp_path / "t.json")
    back = ait.PerformanceProfile.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back == result and back.markdown() == result.markdown()
    assert isinstance(back.trace_file, Path)
    assert set(result.data) == {"schema_version", "created_at", "aitune_version", "config", "target", "input",
                                "runs", "profiler", "regions", "warnings"}
    view = result.data["profiler"]["key_averages"]["cpu_time_total"]
    assert view["sort_by"] == "cpu_time_total" and view["row_limit"] == 20 and 0 < len(view["events"]) <= 20
    assert {"key", "device_type", "count", "self_cpu_time_total_us", "cpu_time_total_us"} <= set(view["events"][0])


def test_signature_is_aitunes():
    params = [(p.name, p.kind.name, p.default) for p in pyinspect.signature(ait.profile).parameters.values()]
    assert params == [("obj", "POSITIONAL_OR_KEYWORD", pyinspect.Parameter.empty),
                      ("input_data", "POSITIONAL_OR_KEYWORD", pyinspect.Parameter.empty),
                      ("inference_function", "KEYWORD_ONLY", None), ("warmup_runs", "KEYWORD_ONLY", 3),
                      ("measured_runs", "KEYWORD_ONLY", 10), ("trace_file", "KEYWORD_ONLY", None)]
    assert [f for f in ait.PerformanceProfile.__dataclass_fields__] == ["data", "trace_file"]


@pytest.mark.gpu
def test_on_a_gpu_runs_and_regions_carry_device_time(tmp_path):
    class Gpu:
        def __init__(self):
            self.encoder = ait.Module(nn.Linear(256, 256).cuda(), name="encoder")
            self.encoder.enable_passthrough()
            self.head = nn.Sequential(nn.Linear(256, 256), nn.ReLU()).cuda()

        def __call__(self, x):
            return self.head(self.encoder(x) @ x.T @ x)

    result = ait.profile(Gpu(), torch.randn(64, 256, device="cuda"), measured_runs=3,
                         trace_file=tmp_path / "gpu.json")
    assert result.data["profiler"]["activities"] == ["CPU", "CUDA"]
    assert "device_time_total" in result.data["profiler"]["key_averages"]
    for run in result.data["runs"]:
        assert run["timing"]["device_time_us"] > 0
        regions = {r["region_id"]: r for r in run["regions"]}
        assert list(regions) == ["aot_module:encoder", "untuned_module:head"]
        assert all(r["device_time_us"] > 0 and 0 < r["device_time_fraction"] <= 1 for r in regions.values())
        assert 0 <= run["residual"]["device_time_fraction"] <= 1   # the matmuls outside both modules
    assert [r.get("wrapper_state") for r in result.data["regions"]] == ["eager", None]
    assert "### By device total" in result.markdown()
    json.loads((tmp_path / "gpu.json").read_text())
