"""Kernel forge: profiler attribution, source selection, candidate validation and timing, generators and
their timeout, plans (serialization, thread isolation, torch.compile, torch.export) and KernelSelectorBackend
checkpoints with a JIT and an AOT delegate. CPU only, except the tests marked gpu."""

from __future__ import annotations

import json
import math
import os
import time
import types

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import (Backend, KernelSelectorBackend, KernelSelectorBackendConfig, TorchEagerBackend,
                                TorchInductorAotBackend, TorchInductorJitBackend)
from aitune_ray.errors import ConfigError
from aitune_ray.kernel_forge import (FlashAttention2KernelProvider, FlashAttention4KernelProvider, FunctionSample,
                                     InductorKernelGenerator, KernelOptimizationPlan, KernelOptimizer,
                                     KernelProvider, ModuleFunctionKernelProfiler, ProviderBenchmark,
                                     SageAttentionKernelProvider, TorchSDPAKernelProvider, benchmark_mix,
                                     benchmark_provider, run_generator)
from aitune_ray.kernel_forge.evaluate import reference_outputs, validate
from aitune_ray.kernel_forge.kernel_provider import attention
from aitune_ray.measure.timing import MeasureConfig
from tests.forge_helpers import (CALLS, ForgeBlock, GeluNorm, NeverFinishingGenerator, QuickGelu, RaisingGenerator,
                                 TestGeluProvider, TestLayerNormProvider, block_samples, call_in_thread, one_thread,
                                 ready)

FAST = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_cv=0.1, max_seconds=0.1)



def gelu_norm_samples(batches=(4, 4, 2)) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [torch.randn(b, 32, 256, generator=gen) for b in batches]


def optimizer(providers=None, generators=None, **kwargs) -> KernelOptimizer:
    kwargs.setdefault("measure", FAST)
    kwargs.setdefault("final_rounds", 20)
    kwargs.setdefault("warmup_iterations", 1)
    return KernelOptimizer(providers, generators, **kwargs)


def by_description(plan: KernelOptimizationPlan) -> dict[tuple[str, str], dict]:
    return {(r["function"], r["description"]): r for r in plan.results}


# ----- profiler ---------------------------------------------------------------------------------------------

def test_profiler_attributes_time_to_modules_and_functions():
    model = ForgeBlock().eval()
    profiler = ModuleFunctionKernelProfiler()
    frame, data = profiler.profile(model, block_samples((2, 2, 3)), warmup_iterations=1)

    assert list(frame.columns) == ["module_name", "module", "function_name", "op", "kernel", "kernel_us"]
    pairs = set(zip(frame["module_name"], frame["function_name"]))
    assert {("norm1", "layer_norm"), ("norm2", "layer_norm"), ("attn", "scaled_dot_product_attention"),
            ("ffn", "gelu"), ("attn.qkv", "linear"), ("ffn.down", "linear")} <= pairs
    assert (frame["kernel_us"] > 0).all()
    assert frame.loc[frame["module_name"] == "attn", "module"].iloc[0] is model.attn
    assert set(frame.loc[frame["function_name"] == "scaled_dot_product_attention", "op"]) == {
        "aten::scaled_dot_product_attention"}

    summary = profiler.describe_results(frame, data, top_k=10).set_index("function_name")
    assert list(summary.reset_index().columns) == ["function_name", "calls", "num_distinct_samples", "num_modules",
                                                   "time_spent_us", "time_spent_pct", "tensor_size_MB"]
    assert summary.loc["layer_norm", ["calls", "num_distinct_samples", "num_modules"]].tolist() == [6, 2, 2]
    assert summary.loc["scaled_dot_product_attention", ["calls", "num_distinct_samples", "num_modules"]].tolist() \
        == [3, 2, 1]
    assert summary.loc["gelu", ["calls", "num_distinct_samples", "num_modules"]].tolist() == [3, 2, 1]
    assert summary["time_spent_pct"].sum() == pytest.approx(100.0)
    assert summary.loc["gelu", "tensor_size_MB"] == pytest.approx((2 + 3) * 16 * 64 * 4 / 2 ** 20)

    # Distinct samples keep exact shapes, dtypes and non-tensor values, with their call counts.
    gelu = sorted((count, tuple(s.args[0].shape)) for count, s in data["gelu"])
    assert gelu == [(1, (3, 16, 64)), (2, (2, 16, 64))]
    count, sample = max(data["layer_norm"], key=lambda item: item[0])
    assert count == 4 and sample.args[1] == (32,) and sample.kwargs["eps"] == pytest.approx(1e-5)
    assert sample.args[0].dtype == torch.float32 and tuple(sample.args[0].shape) == (2, 16, 32)
    q, k, v = data["scaled_dot_product_attention"][0][1].args
    assert tuple(q.shape) == (2, 4, 16, 8) and q.stride() != q.contiguous().stride()  # layout kept


def test_profiler_asks_kineto_to_release_cupti_when_the_trace_stops(monkeypatch):
    """Kineto reads TEARDOWN_CUPTI when a trace stops; "1" detaches CUPTI, so that later kernel launches in
    this process (the timing of candidates) do not pay for the profiler. A caller's own value is kept."""
    from aitune_ray.kernel_forge import profiler as profiler_module

    seen = []
    real = profiler_module.profile

    class Recording(real):
        def __exit__(self, *exc):
            seen.append(os.environ.get("TEARDOWN_CUPTI"))
            return super().__exit__(*exc)

    monkeypatch.setattr(profiler_module, "profile", Recording)
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    ModuleFunctionKernelProfiler().profile(ForgeBlock().eval(), block_samples((2,)), warmup_iterations=0)
    assert seen == ["1"] and "TEARDOWN_CUPTI" not in os.environ
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    ModuleFunctionKernelProfiler().profile(ForgeBlock().eval(), block_samples((2,)), warmup_iterations=0)
    assert seen == ["1", "0"] and os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_cuda_trace_without_kernels_is_made_once_more(monkeypatch, caplog):
    """Kineto traces without GPU activity when CUPTI is still being torn down: the profiler tries again."""
    from aitune_ray.kernel_forge import profiler as profiler_module

    columns = list(profiler_module.PROFILE_COLUMNS)
    empty, full = pd.DataFrame(columns=columns), pd.DataFrame([["m", "M", "gelu", "op", "k", 1.0]], columns=columns)
    traces = [(empty, {}), (full, {"gelu": []})]
    monkeypatch.setattr(profiler_module, "uses_cuda", lambda module, data: True)
    monkeypatch.setattr(ModuleFunctionKernelProfiler, "_trace", lambda self, *args: traces.pop(0))
    frame, data = ModuleFunctionKernelProfiler().profile(ForgeBlock().eval(), block_samples((2,)),
                                                         warmup_iterations=0)
    assert frame is full and data == {"gelu": []} and not traces
    assert "profiling again" in caplog.text


def test_profiler_keeps_values_apart_and_ignores_calls_outside_the_module():
    class TwoGelus(nn.Module):
        def forward(self, x):
            return F.gelu(x) + F.gelu(x, approximate="tanh")

    model = TwoGelus()

    def run(x):
        F.gelu(x * 2)  # outside the module: neither timed nor recorded
        return model(x)

    x = torch.randn(4, 8)
    profiler = ModuleFunctionKernelProfiler({"gelu"})
    frame, data = profiler.profile(run, [x, x, x], module=model, warmup_iterations=0)
    assert set(data) == {"gelu"}
    assert sorted((c, tuple(sorted(s.kwargs.items()))) for c, s in data["gelu"]) == [
        (3, ()), (3, (("approximate", "tanh"),))]
    assert set(frame["module_name"]) == {""}
    summary = profiler.describe_results(frame, data)
    assert summary.loc[summary["function_name"] == "gelu", "calls"].item() == 6

    with pytest.raises(ValueError):
        profiler.profile(run, [x])  # module cannot be inferred from a plain function


# ----- selection and the call mix -----------------------------------------------------------------------

def test_time_share_thresholds_select_functions_per_source_kind():
    summary = pd.DataFrame({"function_name": ["scaled_dot_product_attention", "gelu", "layer_norm", "linear"],
                            "time_spent_pct": [60.0, 25.0, 10.0, 5.0]})
    providers = [TestGeluProvider(), TestLayerNormProvider(), TorchSDPAKernelProvider("math")]
    assert KernelOptimizer.select_functions(summary, providers, 0.0) == [
        "scaled_dot_product_attention", "gelu", "layer_norm"]
    assert KernelOptimizer.select_functions(summary, providers, 20.0) == ["scaled_dot_product_attention", "gelu"]
    assert KernelOptimizer.select_functions(summary, [QuickGelu()], 30.0) == []
    assert KernelOptimizer.select_functions(summary, [QuickGelu()], 25.0) == ["gelu"]
    with pytest.raises(ConfigError):
        KernelOptimizer([TestGeluProvider()], provider_min_time_share_percent=101)


def test_generator_threshold_keeps_generators_off_small_functions():
    CALLS.clear()
    opt = optimizer([TestLayerNormProvider("slow")], [NeverFinishingGenerator()],
                    generator_min_time_share_percent=100.0, generation_timeout=0.1)
    plan = opt.make_plan(GeluNorm(), gelu_norm_samples())
    assert CALLS[("NeverFinishingGenerator", "gelu")] == 0 and CALLS[("NeverFinishingGenerator", "layer_norm")] == 0
    assert [r["source"] for r in plan.results if r["source"] != "original"] == ["provider"]


def test_benchmark_mix_is_reduced_by_the_gcd_of_the_counts():
    a, b, c = (FunctionSample((torch.zeros(n),), {}) for n in (1, 2, 3))
    assert benchmark_mix([(6, a), (4, b), (2, c)]) == [a, a, a, b, b, c]
    assert benchmark_mix([(3, a), (5, b)]) == [a, a, a, b, b, b, b, b]
    assert benchmark_mix([(7, a)]) == [a]
    assert benchmark_mix([]) == []


# ----- candidates ------------------------------------------------------------------------------------------

def test_faster_kept_slower_dropped_wrong_rejected_raising_dropped():
    providers = [TestGeluProvider(b) for b in ("slow", "zeros", "negated", "off3", "raises", "unsupported", "cached")]
    providers += [TestLayerNormProvider("slow"), TestLayerNormProvider("negated")]
    plan = optimizer(providers).make_plan(GeluNorm(), gelu_norm_samples())

    assert plan.functions == {"gelu": "test gelu cached"}
    records = by_description(plan)
    cached = records[("gelu", "test gelu cached")]
    assert cached["status"] == "ok" and cached["selected"] and cached["speedup"] > 1.0
    assert cached["max_error"] < 1e-5 and cached["samples_compared"] == 2 and cached["mix_calls"] == 3
    slow = records[("gelu", "test gelu slow")]
    assert slow["status"] == "ok" and not slow["selected"] and slow["speedup"] < 1.0
    assert not records[("layer_norm", "test layer_norm slow")]["selected"]
    for behavior, error in (("zeros", 1.0), ("negated", 2.0), ("off3", 0.03)):
        record = records[("gelu", f"test gelu {behavior}")]
        assert record["status"] == "rejected", record
        assert record["max_error"] == pytest.approx(error, rel=1e-3)
        assert "exceeds tolerance" in record["error"]
    assert records[("layer_norm", "test layer_norm negated")]["status"] == "rejected"
    raising = records[("gelu", "test gelu raises")]
    assert raising["status"] == "error" and "this test kernel always fails" in raising["error"]
    assert records[("gelu", "test gelu unsupported")]["status"] == "unsupported"
    assert records[("gelu", "original F.gelu")]["source"] == "original"
    json.dumps(plan.to_dict())  # every record is plain data


class PlainDataOptimizer(KernelOptimizer):
    """Runs every benchmark as another process would: JSON in, JSON out, no live provider back."""

    def run_benchmarks(self, jobs, searches):
        for job in jobs:
            spec = job.provider if isinstance(job.provider, dict) else job.provider.to_dict()
            record = benchmark_provider(job.function, json.loads(json.dumps(spec)), searches[job.function].data,
                                        measure_config=self.measure, source=job.source)
            yield ProviderBenchmark.from_dict(json.loads(json.dumps(record.to_dict())))


def test_optimizer_decides_on_plain_data_records():
    opt = PlainDataOptimizer([TestGeluProvider("slow"), TestGeluProvider("cached"), TestGeluProvider("negated")],
                             [QuickGelu("exact")], generator_min_time_share_percent=0.0, measure=FAST,
                             final_rounds=20, warmup_iterations=0)
    plan = opt.make_plan(GeluNorm(), gelu_norm_samples())
    assert plan.functions == {"gelu": "test gelu cached"}
    assert KernelOptimizationPlan.from_dict(plan.to_dict()).providers[0].behavior == "cached"
    statuses = {(r["source"], r["description"]): r["status"] for r in plan.results}
    assert statuses[("provider", "test gelu negated")] == "rejected"
    assert statuses[("generator:QuickGelu", "test gelu exact")] == "ok"


def test_tolerance_is_per_provider_and_configurable():
    assert TorchSDPAKernelProvider().tolerance_for(torch.float16) == 2e-2
    assert SageAttentionKernelProvider().tolerance_for(torch.bfloat16) == 2e-2
    assert SageAttentionKernelProvider().tolerance_for(torch.float32) == 1e-3
    assert TestGeluProvider().tolerance_for(torch.float16) == 1e-2
    loose = TestGeluProvider("off3")
    loose.tolerance = 0.05
    data = [(1, FunctionSample((torch.randn(64, 64),), {}))]
    assert benchmark_provider("gelu", loose.to_dict(), data, measure_config=FAST).status == "ok"
    assert benchmark_provider("gelu", TestGeluProvider("off3").to_dict(), data, measure_config=FAST).status \
        == "rejected"
    assert benchmark_provider("gelu", TestGeluProvider("off3").to_dict(), data, tolerance=0.05,
                              measure_config=FAST).status == "ok"


def perturbed(out: torch.Tensor, relative: float, seed: int = 0) -> torch.Tensor:
    noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    ref = out.float()
    return (ref + noise * (relative * ref.norm() / noise.norm())).to(out.dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_tolerance_admits_int8_qk_error_and_rejects_a_few_percent(dtype, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 32, 16, generator=gen).to(dtype) for _ in range(3))
    samples = [FunctionSample((q, k, v), {"is_causal": True})]
    refs = reference_outputs("scaled_dot_product_attention", samples)
    provider = SageAttentionKernelProvider.from_dict({"type": "SageAttentionKernelProvider"})
    assert provider.is_ready

    def check(transform):
        def sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None):
            assert tensor_layout == "HND"
            return transform(F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=sm_scale))

        library = types.SimpleNamespace(sageattn=sageattn)
        monkeypatch.setattr(SageAttentionKernelProvider, "_library", lambda self: library)
        return validate(provider, samples, refs, provider.tolerance_for)

    report = check(lambda out: perturbed(out, 0.013))
    assert report.passed and 0.010 < report.max_error < 0.016
    for transform in (lambda out: perturbed(out, 0.03), torch.zeros_like, torch.neg):
        assert not check(transform).passed


# ----- attention providers: support rules and layouts ----------------------------------------------------

def test_attention_support_rules():
    q = torch.randn(2, 8, 16, 32)
    kv = torch.randn(2, 2, 16, 32)
    parse = attention.parse_call
    assert not parse((q, q, q), {}).gqa
    assert parse((q, kv, kv), {"enable_gqa": True}).gqa
    for args, kwargs, words in (
            ((q, q, q), {"attn_mask": torch.ones(16, 16, dtype=torch.bool)}, "attn_mask"),
            ((q, q, q, None, 0.1), {}, "dropout"),
            ((q, kv, kv), {}, "enable_gqa"),
            ((q, torch.randn(2, 3, 16, 32), torch.randn(2, 3, 16, 32)), {"enable_gqa": True}, "grouped"),
            ((q[0], q[0], q[0]), {}, "4-D")):
        with pytest.raises(attention.Unsupported, match=words):
            parse(args, kwargs)
    with pytest.raises(attention.Unsupported, match="CUDA"):
        attention.check_samples([FunctionSample((q, q, q), {})], "FlashAttention-4")
    # A (B,H,S,D) view of (B,S,H,D) data converts without a copy; a contiguous (B,H,S,D) tensor is copied.
    nhd = torch.randn(2, 16, 8, 32)
    assert attention.hnd_to_nhd(nhd.transpose(1, 2)).data_ptr() == nhd.data_ptr()
    assert attention.hnd_to_nhd(q).is_contiguous()


def fake_flash(expect_seq: int):
    """flash_attn_func on (B, S, H, D) tensors, computed by PyTorch SDPA."""
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, pack_gqa=None):
        assert q.shape[1] == expect_seq and dropout_p == 0.0
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=causal, scale=softmax_scale,
                                             enable_gqa=q.shape[2] != k.shape[2])
        return out.transpose(1, 2), None

    return types.SimpleNamespace(flash_attn_func=flash_attn_func)


@pytest.mark.parametrize("cls", [FlashAttention4KernelProvider, FlashAttention2KernelProvider])
def test_flash_attention_providers_convert_layouts(cls, monkeypatch):
    monkeypatch.setattr(cls, "_library", lambda self: fake_flash(expect_seq=24))
    provider = cls.from_dict({"type": cls.__name__})
    q = torch.randn(2, 8, 24, 16)
    k, v = torch.randn(2, 2, 24, 16), torch.randn(2, 2, 24, 16)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    out = provider(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    assert out.shape == expected.shape and torch.allclose(out, expected, atol=1e-5)
    fresh = cls()
    assert not fresh.prepare([FunctionSample((q, k, v), {"enable_gqa": True})])  # CPU: CUDA only
    assert "CUDA" in fresh.reason


def test_missing_libraries_and_unsupported_samples_remove_candidates_only():
    providers = [FlashAttention4KernelProvider(), FlashAttention2KernelProvider(), SageAttentionKernelProvider(),
                 TorchSDPAKernelProvider("cudnn"), TorchSDPAKernelProvider("math"), TestGeluProvider("cached")]
    plan = optimizer(providers).make_plan(ForgeBlock().eval(), block_samples())
    assert plan.functions.get("gelu") == "test gelu cached"
    sdpa = {r["description"]: r for r in plan.results if r["function"] == "scaled_dot_product_attention"}
    assert sdpa["PyTorch SDPA MATH"]["status"] == "ok"
    assert sdpa["PyTorch SDPA CUDNN_ATTENTION"]["status"] == "unsupported"
    others = [r for name, r in sdpa.items() if name.startswith(("FlashAttention", "SageAttention"))]
    assert len(others) == 3 and all(r["status"] == "unsupported" and r["error"] for r in others)
    if not torch.cuda.is_available():
        assert all("not installed" in r["error"] or "CUDA" in r["error"] for r in others)


# ----- generators -------------------------------------------------------------------------------------------

class SlowPrepareLayerNorm(TestLayerNormProvider):
    __test__ = False

    def _prepare(self, samples) -> bool:
        time.sleep(self.delay_s)
        return True


def test_generation_timeout_counts_from_submission_and_keeps_other_results():
    CALLS.clear()
    providers = [SlowPrepareLayerNorm("exact", delay_s=2.0)]
    generators = [NeverFinishingGenerator(), QuickGelu("cached", delay_s=0.1), RaisingGenerator()]
    opt = optimizer(providers, generators, generator_min_time_share_percent=0.0, generation_timeout=1.0)
    plan = opt.make_plan(GeluNorm(), gelu_norm_samples())

    # (the layer_norm provider computes the original itself: whether it wins is timing noise, not the point)
    assert plan.functions.get("gelu") == "test gelu cached"
    records = [r for r in plan.results if r["source"].startswith("generator:")]
    timed_out = [r for r in records if r["status"] == "timed out"]
    assert sorted(r["function"] for r in timed_out) == ["gelu", "layer_norm"]
    # The providers took over 2 s; the 1 s clock started at submission, so it had run out when they finished
    # (counted after the providers, it would have ended a whole second later).
    providers_s = next(r["seconds"] for r in plan.results if r["description"] == "test layer_norm exact")
    assert providers_s >= 2.0
    assert all(1.0 <= r["seconds"] < providers_s + 0.5 for r in timed_out), (providers_s, timed_out)
    raised = [r for r in records if r["source"] == "generator:RaisingGenerator"]
    assert raised[0]["status"] == "error" and "the generator broke" in raised[0]["error"]
    generated = [r for r in records if r["source"] == "generator:QuickGelu"]
    assert generated[0]["status"] == "ok" and generated[0]["selected"]


def test_plain_data_generator_run_and_benchmark_with_inductor():
    gen = torch.Generator().manual_seed(4)
    data = [(2, FunctionSample((torch.randn(8, 64, generator=gen),), {})),
            (1, FunctionSample((torch.randn(4, 64, generator=gen),), {"approximate": "tanh"}))]
    outcome = run_generator("gelu", json.loads(json.dumps(InductorKernelGenerator(["gelu"]).to_dict())), data,
                            timeout=300)
    assert outcome.status == "ok", outcome.error
    assert outcome.provider["ready"] and outcome.provider["function"] == "gelu"
    json.dumps(outcome.to_dict())

    record = benchmark_provider("gelu", outcome.provider, data, measure_config=FAST)
    assert record.status == "ok", record.error
    assert record.max_error < 1e-5 and record.median_ms > 0 and record.mix_calls == 3 and record.gpu == "cpu"
    assert json.loads(json.dumps(record.to_dict()))["provider"]["type"] == "InductorFunctionKernelProvider"

    assert run_generator("layer_norm", InductorKernelGenerator(["gelu"]), data).status == "unsupported"
    assert run_generator("gelu", RaisingGenerator(), data).status == "error"
    assert run_generator("gelu", NeverFinishingGenerator(), data, timeout=0.2).status == "timed out"


# ----- plans ---------------------------------------------------------------------------------------------------

def test_plan_round_trips_through_json():
    plan = KernelOptimizationPlan((ready(TestGeluProvider("negated")), ready(TestLayerNormProvider("exact"))),
                                  ({"function": "gelu", "description": "x", "status": "ok"},))
    again = KernelOptimizationPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.functions == plan.functions and again.results == plan.results
    assert all(p.is_ready for p in again.providers)
    model, x = GeluNorm(dim=16), torch.randn(3, 16)
    with again.apply(model):
        out = model(x)
    assert torch.allclose(out, model.fc(-F.gelu(model.norm(x))), atol=1e-6)
    assert KernelOptimizationPlan.from_dict(KernelOptimizationPlan().to_dict()).is_empty

    with pytest.raises(ConfigError):
        KernelOptimizationPlan((ready(TestGeluProvider()), ready(TestGeluProvider("cached"))))
    with pytest.raises(ConfigError):
        KernelOptimizationPlan((TestGeluProvider(),))  # never prepared
    with pytest.raises(ConfigError):
        KernelProvider.from_dict({"type": "NoSuchProvider"})


def test_applied_plan_stays_in_the_module_forward_and_its_thread():
    class Handshake(nn.Module):
        def forward(self, x):
            mine = F.gelu(x)
            theirs = call_in_thread(F.gelu, x)  # another thread, during this forward
            return mine, theirs

    class Failing(nn.Module):
        def forward(self, x):
            F.gelu(x)
            raise RuntimeError("boom")

    model, failing, x = Handshake(), Failing(), torch.randn(5, 7)
    plan = KernelOptimizationPlan((ready(TestGeluProvider("negated")),))
    with plan.apply(model), plan.apply(failing):
        mine, theirs = model(x)
        outside = F.gelu(x)
        with pytest.raises(RuntimeError, match="boom"):
            failing(x)
        after_failure = F.gelu(x)
    assert torch.allclose(mine, -F.gelu(x), atol=1e-6)
    assert torch.equal(theirs, F.gelu(x)) and torch.equal(outside, F.gelu(x)) and torch.equal(after_failure, F.gelu(x))
    assert torch.equal(model(x)[0], F.gelu(x))  # removed after the block


def test_plan_works_under_torch_compile_and_torch_export():
    model, x = GeluNorm(dim=16).eval(), torch.randn(3, 16)
    expected = model.fc(-F.gelu(model.norm(x))).detach()
    plan = KernelOptimizationPlan((ready(TestGeluProvider("negated")),))
    torch._dynamo.reset()
    with plan.apply(model):
        compiled = torch.compile(model, backend="eager", fullgraph=True)  # Dynamo traces through the mode
        assert torch.allclose(compiled(x), expected, atol=1e-6)
        for strict in (False, True):
            program = torch.export.export(model, (x,), strict=strict)
            targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
            assert "aten.neg.default" in targets and "aten.erf.default" in targets, (strict, targets)
            assert torch.allclose(program.module()(x), expected, atol=1e-6)
    assert torch.allclose(compiled(x), model.fc(F.gelu(model.norm(x))), atol=1e-6)  # guards see the change


@pytest.mark.parametrize("backend,op", [("math", "aten._scaled_dot_product_attention_math.default"),
                                        ("flash", "aten._scaled_dot_product_flash_attention_for_cpu.default")])
def test_torch_sdpa_provider_pins_its_backend_into_exported_programs(backend, op):
    model, xs = ForgeBlock().eval(), block_samples()
    _, data = ModuleFunctionKernelProfiler({"scaled_dot_product_attention"}).profile(model, xs, warmup_iterations=0)
    provider = TorchSDPAKernelProvider(backend)
    assert provider.prepare([s for _, s in data["scaled_dot_product_attention"]]) and provider.pin_op
    again = KernelOptimizationPlan.from_dict(json.loads(json.dumps(KernelOptimizationPlan((provider,)).to_dict())))
    expected = model(xs[0])
    with again.apply(model):
        program = torch.export.export(model, (xs[0],))
    targets = {str(n.target) for n in program.graph.nodes if "attention" in str(n.target)}
    assert targets == {op}
    assert torch.allclose(program.module()(xs[0]), expected, atol=1e-5)


# ----- KernelSelectorBackend ----------------------------------------------------------------------------------

def selector_config(*providers, **kwargs) -> KernelSelectorBackendConfig:
    kwargs.setdefault("measure", FAST.to_dict())
    kwargs.setdefault("final_rounds", 20)
    return KernelSelectorBackendConfig(kernel_providers=list(providers) or [TestGeluProvider("cached")], **kwargs)


def tuned_module(backend: Backend, samples) -> ait.Module:
    strategy = ait.OneBackendStrategy(backend, measure_config=FAST).enable_performance_validation(False)
    wrapped = ait.Module(GeluNorm(), "m", strategy=strategy)
    for x in samples:
        wrapped(x)
    wrapped.tune(device="cpu")
    assert wrapped.backend is not None, wrapped.failure
    return wrapped


def test_config_round_trips_and_defaults():
    config = KernelSelectorBackendConfig(
        kernel_providers=[TorchSDPAKernelProvider("math"), TestGeluProvider("off3")],
        kernel_generators=[InductorKernelGenerator(["gelu"], mode="default"), QuickGelu(delay_s=0.5)],
        generator_min_time_share_percent=5.0, tolerance=0.02)
    again = KernelSelectorBackendConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.to_dict() == config.to_dict() and again.key() == config.key()
    assert [type(p).__name__ for p in again.kernel_providers] == ["TorchSDPAKernelProvider", "TestGeluProvider"]
    assert again.kernel_generators[1].delay_s == 0.5 and again.kernel_generators[0].functions == ["gelu"]

    names = [p.name for p in KernelSelectorBackendConfig().kernel_providers]
    assert names[:2] == ["PyTorch SDPA FLASH_ATTENTION", "PyTorch SDPA CUDNN_ATTENTION"]
    assert names[2].startswith("FlashAttention-4")
    assert KernelSelectorBackendConfig(kernel_providers=None, kernel_generators=QuickGelu()).kernel_providers == []
    with pytest.raises(ConfigError):
        KernelSelectorBackendConfig(kernel_providers=[])
    with pytest.raises(ConfigError):
        KernelSelectorBackendConfig(provider_min_time_share_percent=-1)

    backend = KernelSelectorBackend(config, TorchInductorAotBackend())
    assert not backend.is_jit and KernelSelectorBackend(config).is_jit
    assert isinstance(KernelSelectorBackend().delegate, TorchInductorJitBackend)
    rebuilt = Backend.from_spec(json.loads(json.dumps(backend.spec())))
    assert isinstance(rebuilt.delegate, TorchInductorAotBackend) and rebuilt.key() == backend.key()
    assert rebuilt.key() != KernelSelectorBackend(config).key()


def test_empty_plan_builds_the_unchanged_module(tmp_path):
    backend = KernelSelectorBackend(selector_config(TestGeluProvider("slow")), TorchEagerBackend())
    model, samples = GeluNorm(), gelu_norm_samples()
    from aitune_ray.model.samples import Sample, SampleStore
    store = SampleStore([Sample((x,), {}, model(x), x.shape[0]) for x in samples])
    backend.build(model, store, torch.device("cpu"), tmp_path)
    assert backend.plan.is_empty and backend.plan.results
    assert torch.equal(backend.infer(samples[0]), model(samples[0]))
    state, artifacts = backend.export()
    assert state["kernel_plan"]["providers"] == [] and artifacts == {}
    # the report row says what this candidate really is: the delegate alone
    from aitune_ray.records.results import BuildResult
    from aitune_ray.report.model import describe_candidate
    row = describe_candidate(BuildResult(key="k", backend="KernelSelectorBackend", spec={}, status="ok", state=state))
    assert row.startswith("empty kernel plan: no function replaced")


def test_jit_delegate_checkpoint_stores_the_plan_and_restores_without_profiling(tmp_path, monkeypatch):
    samples = gelu_norm_samples()
    backend = KernelSelectorBackend(selector_config(TestGeluProvider("cached"), TestLayerNormProvider("negated")),
                                    TorchEagerBackend())
    wrapped = tuned_module(backend, samples)
    assert wrapped.backend.plan.functions == {"gelu": "test gelu cached"}
    ait.save(wrapped, tmp_path / "m.ait")

    def no_profiling(*args, **kwargs):
        raise AssertionError("restoring must not profile")

    monkeypatch.setattr(ModuleFunctionKernelProfiler, "profile", no_profiling)
    loaded = ait.Module(GeluNorm(seed=5), "m")
    ait.load(loaded, tmp_path / "m.ait")
    assert isinstance(loaded.backend, KernelSelectorBackend) and loaded.backend.is_jit
    assert loaded.backend.plan.functions == {"gelu": "test gelu cached"}
    before = CALLS[("TestGeluProvider", "cached")]
    out = loaded(samples[0])
    assert CALLS[("TestGeluProvider", "cached")] == before + 1  # the plan is active around inference
    assert torch.allclose(out, GeluNorm()(samples[0]), atol=1e-5)
    assert torch.equal(F.gelu(samples[0]), torch.ops.aten.gelu(samples[0]))  # nothing leaks outside


def test_inductor_jit_delegate_round_trip(tmp_path):
    from aitune_ray.model.samples import Sample, SampleStore

    model, samples = GeluNorm(dim=64), [torch.randn(4, 8, 64), torch.randn(2, 8, 64)]
    store = SampleStore([Sample((x,), {}, model(x).detach(), x.shape[0]) for x in samples])
    backend = KernelSelectorBackend(selector_config(TestGeluProvider("cached")))
    backend.build(model, store, torch.device("cpu"), tmp_path / "build")
    assert backend.plan.functions == {"gelu": "test gelu cached"}
    state, artifacts = backend.export()
    restored = Backend.from_spec(json.loads(json.dumps(backend.spec())))
    restored.restore(model, json.loads(json.dumps(state)), artifacts, torch.device("cpu"), tmp_path / "restore")
    restored.deploy()
    assert restored.plan.functions == backend.plan.functions
    assert torch.allclose(restored.infer(samples[0]), store.samples[0].outputs, atol=1e-5)


def test_aot_delegate_captures_the_kernels_and_checkpoints_the_artifact_only(tmp_path):
    samples = gelu_norm_samples((4, 2))
    backend = KernelSelectorBackend(selector_config(TestGeluProvider("cached")), TorchInductorAotBackend())
    before = CALLS[("TestGeluProvider", "cached")]
    wrapped = tuned_module(backend, samples)
    assert wrapped.backend.plan.functions == {"gelu": "test gelu cached"}
    assert CALLS[("TestGeluProvider", "cached")] > before
    ait.save(wrapped, tmp_path / "m.ait")
    state, artifacts = wrapped.backend.export()
    assert "kernel_plan" not in state and state["captured_kernels"] == {"gelu": "test gelu cached"}
    assert list(artifacts) == ["model.pt2"]

    loaded = ait.Module(GeluNorm(seed=5), "m")
    ait.load(loaded, tmp_path / "m.ait", allow_native_code=True)  # an AOTInductor package is compiled code
    assert isinstance(loaded.backend, KernelSelectorBackend) and not loaded.backend.is_jit
    calls = CALLS[("TestGeluProvider", "cached")]
    out = loaded(samples[0])
    assert CALLS[("TestGeluProvider", "cached")] == calls  # the kernel runs inside the artifact
    assert torch.allclose(out, GeluNorm()(samples[0]), atol=1e-4)


# ----- GPU ------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_profiler_and_sdpa_providers():
    model = ForgeBlock(dim=256, heads=4).cuda().half().eval()
    samples = [torch.randn(4, 512, 256, device="cuda", dtype=torch.half) for _ in range(3)]
    profiler = ModuleFunctionKernelProfiler()
    frame, data = profiler.profile(model, samples)
    assert "scaled_dot_product_attention" in set(frame["function_name"])
    assert (frame["kernel_us"] > 0).all()
    providers = [TorchSDPAKernelProvider("flash"), TorchSDPAKernelProvider("cudnn"),
                 TorchSDPAKernelProvider("efficient"), FlashAttention4KernelProvider(),
                 FlashAttention2KernelProvider(), SageAttentionKernelProvider()]
    plan = KernelOptimizer(providers, final_rounds=10).make_plan(model, samples)
    sdpa = [r for r in plan.results if r["function"] == "scaled_dot_product_attention"]
    assert any(r["status"] == "ok" for r in sdpa), sdpa
    for r in sdpa:
        assert r["status"] in ("ok", "unsupported", "rejected", "error"), r
        if r["status"] == "ok" and r["source"] != "original":
            assert r["max_error"] < 2e-2 and r["gpu"] != "cpu"
    with plan.apply(model):
        out = model(samples[0])
    assert torch.isfinite(out).all()


@pytest.mark.gpu
def test_gpu_kernel_selector_backend_default_providers(tmp_path):
    from aitune_ray.model.samples import Sample, SampleStore

    model = ForgeBlock(dim=256, heads=4).cuda().half().eval()
    xs = [torch.randn(4, 512, 256, device="cuda", dtype=torch.half) for _ in range(2)]
    store = SampleStore([Sample((x,), {}, model(x).detach(), 4) for x in xs])
    backend = KernelSelectorBackend(KernelSelectorBackendConfig(), TorchEagerBackend())
    backend.build(model, store, torch.device("cuda"), tmp_path)
    out = backend.infer(xs[0])
    err = (out.float() - store.samples[0].outputs.float()).norm() / store.samples[0].outputs.float().norm()
    assert float(err) < 2e-2
    assert math.isfinite(float(err))
