"""AITune 0.6.0's unit tests of aitune.torch.profile (tests/unit/torch/performance/test_profiling.py), ported:
the public ones, with the same inputs and assertions, `aitune.torch` read as `aitune_ray`. AITune's tests of
its private runtime-profile classes (`_RunTiming`, `_RegionAggregate`, `_Residual`, `_RuntimeProfile`) and of
its attribution hooks are not ported: this package builds the same data by its own code
(aitune_ray/performance/)."""

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import TorchEagerBackend
from aitune_ray.performance import PerformanceProfile


class TinyLinear(torch.nn.Module):
    """One Linear(4, out_features), called on x (AITune's TinyKeywordModel, TinyAotModel and BoomVae)."""

    def __init__(self, out_features: int = 2):
        super().__init__()
        self.linear = torch.nn.Linear(4, out_features)

    def forward(self, x):
        return self.linear(x)


def test_profile_returns_in_memory_data_without_files_by_default(tmp_path):
    model = TinyLinear().eval()

    def inference_function(**kwargs):
        with torch.inference_mode():
            return model(**kwargs)

    result = ait.profile(obj=model, input_data={"x": torch.randn(1, 4)}, inference_function=inference_function,
                         warmup_runs=1, measured_runs=2)
    assert isinstance(result, PerformanceProfile)
    assert result.trace_file is None
    assert "artifacts" not in result.data
    assert list(tmp_path.iterdir()) == []
    assert result.data["config"]["warmup_runs"] == 1
    assert result.data["config"]["measured_runs"] == 2
    assert result.data["config"]["uses_inference_function"] is True
    assert result.data["input"]["kwargs"] == ["x"]
    assert len(result.data["runs"]) == 2
    assert all(run["timing"]["wall_time_us"] > 0 for run in result.data["runs"])
    assert all(run["timing"]["cpu_time_us"] > 0 for run in result.data["runs"])
    for run in result.data["runs"]:
        assert [region["region_id"] for region in run["regions"]] == ["untuned_module:linear"]
        assert run["regions"][0]["cpu_time_us"] > 0
    assert result.data["regions"] == [{"id": "untuned_module:linear", "name": "linear", "kind": "untuned_module",
                                       "module_type": "torch.nn.modules.linear.Linear"}]
    assert result.data["warnings"] == []
    key_averages = result.data["profiler"]["key_averages"]["cpu_time_total"]
    assert key_averages["sort_by"] == "cpu_time_total"
    assert key_averages["events"]
    assert any(event["key"] == "aitune.performance.profiled_run" for event in key_averages["events"])
    markdown = result.markdown()
    assert "# Performance Profile" in markdown
    assert "## Trace" not in markdown
    assert "## Regions" in markdown
    assert "`untuned_module:linear`" in markdown
    assert "No warnings." in markdown


def test_profile_runs_callable_under_no_grad():
    grad_states = []

    def inference_function():
        grad_states.append(torch.is_grad_enabled())
        return torch.ones(1)

    with torch.enable_grad():
        ait.profile(obj=inference_function, input_data=None, warmup_runs=1, measured_runs=2)
    assert grad_states == [False, False, False, False]   # warm-up, the profiler's warm-up, two measured runs


def test_performance_profile_rejects_markdown_options():
    with pytest.raises(ValueError, match="markdown options are not supported yet"):
        PerformanceProfile(data={}).markdown(options=object())


def test_markdown_includes_residual_for_run_without_regions():
    profile = PerformanceProfile(data={
        "created_at": "2026-05-25T00:00:00+00:00", "aitune_version": "test",
        "config": {"warmup_runs": 0, "measured_runs": 1, "uses_inference_function": False},
        "target": {"type": "tests.Target"}, "input": {"args_count": 0, "kwargs": []},
        "runs": [{"run_index": 0, "timing": {"wall_time_us": 100.0, "cpu_time_us": 80.0}, "regions": [],
                  "residual": {"cpu_time_us": 80.0, "cpu_time_fraction": 1.0}}],
        "regions": [], "profiler": {"key_averages": {}}, "warnings": []})
    markdown = profile.markdown()
    assert "## Per-Run Attribution" in markdown
    assert "| 0 | _(residual)_ | — | 0.080 ms | 100.0% | - | - |" in markdown


def test_profile_records_tuned_aot_module_regions(tmp_path):
    name = "attributed-linear"
    model = ait.Module(TinyLinear(out_features=4), name,
                       strategy=ait.OneBackendStrategy(TorchEagerBackend()).enable_find_max_batch_size(False))
    sample = torch.ones(1, 4)
    model(sample)
    model.tune(device=torch.device("cpu"), executor=ait.InlineExecutor(remeasure_rounds=2))

    trace_file = tmp_path / "runtime_attribution" / "trace.json"
    result = ait.profile(obj=model, input_data=sample, warmup_runs=1, measured_runs=2, trace_file=trace_file)
    report, markdown, trace = result.data, result.markdown(), trace_file.read_text(encoding="utf-8")
    assert result.trace_file == trace_file.resolve()
    assert trace_file.exists() and trace_file.stat().st_size > 0
    assert "artifacts" not in report
    assert len(report["runs"]) == 2
    assert all(len(run["regions"]) == 1 for run in report["runs"])
    assert all(run["regions"][0]["region_id"] == f"aot_module:{name}" for run in report["runs"])
    assert all(run["regions"][0]["cpu_time_us"] > 0 for run in report["runs"])
    assert all(0 < run["regions"][0]["cpu_time_fraction"] <= 1 for run in report["runs"])
    assert report["regions"] == [{"id": f"aot_module:{name}", "name": name, "kind": "aot_managed_module",
                                  "module_type": f"{TinyLinear.__module__}.{TinyLinear.__qualname__}",
                                  "wrapper_state": "tuned"}]
    assert report["warnings"] == []
    region = f"aitune.performance.aot_module:{name}"
    assert region in trace
    assert any(e["key"] == region for e in report["profiler"]["key_averages"]["cpu_time_total"]["events"])
    assert "## Regions" in markdown and f"`aot_module:{name}`" in markdown
    assert "## Per-Run Attribution" in markdown and "Calls" in markdown and "CPU Fraction" in markdown


def test_profile_propagates_inference_exception_and_restores_state():
    class BoomVae(TinyLinear):
        def decode(self, x):
            raise RuntimeError("inference failure")

    class Pipe:
        def __init__(self):
            self.vae = BoomVae()

    pipe = Pipe()
    original_decode = type(pipe.vae).decode
    with pytest.raises(RuntimeError, match="inference failure"):
        ait.profile(obj=pipe, input_data=torch.randn(1, 4), inference_function=lambda x: pipe.vae.decode(x),
                    warmup_runs=1, measured_runs=1)
    assert "decode" not in vars(pipe.vae)
    assert type(pipe.vae).decode is original_decode
    assert not any(key.startswith("_aitune") for key in vars(pipe.vae))   # AITune's _CONTEXT_ATTR is private
