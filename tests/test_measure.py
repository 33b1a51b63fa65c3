"""Correctness comparison and timing: aitune_ray.measure."""

import math
import statistics
import time
import types

import pytest
import torch

from aitune_ray.measure import correctness, timing
from aitune_ray.measure.correctness import compare_outputs, default_tolerance
from aitune_ray.measure.timing import MeasureConfig, Timing, measure, profile_samples
from aitune_ray.model.samples import Sample, SampleStore


def _ref(*shape, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def _scaled_noise(ref, rel_error, seed=1):
    """ref plus noise whose L2 norm is rel_error times ref's (computed in float64)."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    ref64 = ref.double()
    noise *= rel_error * ref64.norm() / noise.norm()
    return (ref64 + noise).to(ref.dtype)


# ----- correctness --------------------------------------------------------------------------


def test_relative_l2_error_is_measured_per_output():
    ref = (_ref(8, 16, seed=0), _ref(4, seed=2))
    out = (_scaled_noise(ref[0], 2e-4), _scaled_noise(ref[1], 6e-4))
    report = compare_outputs([(out, ref)])
    assert report.passed
    # The worst output is the second one, at 6e-4 relative L2, not an error pooled over both outputs.
    assert report.max_error == pytest.approx(6e-4, rel=1e-3)
    assert "output[1]" in report.reason
    assert report.samples_compared == 1


def test_relative_l2_is_relative_to_the_reference_norm():
    ref = _ref(32, seed=3) * 1e4
    out = _scaled_noise(ref, 5e-4)
    report = compare_outputs([(out, ref)])
    assert report.passed
    assert report.max_error == pytest.approx(5e-4, rel=1e-3)


@pytest.mark.parametrize("dtype,expected", [
    (torch.float64, 1e-6), (torch.float32, 1e-3), (torch.float16, 1e-2), (torch.bfloat16, 2e-2),
    (torch.int64, 0.0), (torch.bool, 0.0),
])
def test_default_tolerance_per_dtype(dtype, expected):
    assert default_tolerance(dtype) == expected


@pytest.mark.parametrize("dtype,inside,outside", [
    (torch.float32, 5e-4, 3e-3),
    (torch.float16, 5e-3, 3e-2),
    (torch.bfloat16, 1e-2, 6e-2),
    (torch.float64, 5e-7, 3e-6),
])
def test_default_tolerance_is_applied_by_output_dtype(dtype, inside, outside):
    ref = _ref(64, 64, dtype=dtype)
    # The noise is generated in float64, so low-precision rounding adds a little: keep clear margins.
    assert compare_outputs([(_scaled_noise(ref, inside), ref)]).passed
    report = compare_outputs([(_scaled_noise(ref, outside), ref)])
    assert not report.passed
    assert report.tolerance == default_tolerance(dtype)


def test_integer_outputs_must_match_exactly():
    ref = torch.arange(10)
    assert compare_outputs([(ref.clone(), ref)]).passed
    off = ref.clone()
    off[3] += 1
    assert not compare_outputs([(off, ref)]).passed
    # A float tolerance does not loosen the check of integer outputs.
    assert not compare_outputs([(off, ref)], tolerance=0.5).passed


def test_configurable_tolerance():
    ref = _ref(256)
    out = _scaled_noise(ref, 5e-3)
    assert not compare_outputs([(out, ref)]).passed          # fp32 default 1e-3
    loose = compare_outputs([(out, ref)], tolerance=1e-2)
    assert loose.passed and loose.tolerance == 1e-2
    tight = compare_outputs([(_scaled_noise(ref, 5e-5), ref)], tolerance=1e-5)
    assert not tight.passed and tight.tolerance == 1e-5


def test_rejection_reason_says_by_how_much():
    ref = _ref(100)
    report = compare_outputs([(_scaled_noise(ref, 4e-3), ref)], tolerance=1e-3)
    assert not report.passed
    assert report.max_error == pytest.approx(4e-3, rel=1e-3)
    assert "0.004" in report.reason          # the error
    assert "0.001" in report.reason          # the tolerance
    assert "4.0x" in report.reason           # how far over


def test_every_sample_is_compared_and_the_failing_one_is_named():
    refs = [_ref(10, seed=s) for s in range(3)]
    outs = [r.clone() for r in refs]
    outs[2] = _scaled_noise(refs[2], 0.1)
    report = compare_outputs(list(zip(outs, refs)))
    assert not report.passed
    assert report.samples_compared == 3
    assert "sample 2" in report.reason


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_rejected(bad):
    ref = _ref(20)
    out = ref.clone()
    out[7] = bad
    report = compare_outputs([(out, ref)], tolerance=1.0)
    assert not report.passed
    assert "NaN/Inf" in report.reason
    assert report.max_error == math.inf


def test_nan_where_eager_has_nan_is_accepted_but_finite_where_eager_has_nan_is_not():
    ref = _ref(20)
    ref[4] = math.nan
    same = ref.clone()
    assert compare_outputs([(same, ref)]).passed
    filled = torch.nan_to_num(ref.clone(), nan=0.0)
    assert not compare_outputs([(filled, ref)], tolerance=1.0).passed


def test_all_zeros_output_is_rejected():
    ref = _ref(16, 16)
    report = compare_outputs([(torch.zeros_like(ref), ref)], tolerance=0.5)
    assert not report.passed
    assert report.max_error == pytest.approx(1.0)


def test_sign_flipped_output_is_rejected():
    ref = _ref(16, 16)
    report = compare_outputs([(-ref, ref)], tolerance=0.5)
    assert not report.passed
    assert report.max_error == pytest.approx(2.0)


def test_shape_mismatch_is_rejected():
    ref = _ref(4, 8)
    report = compare_outputs([(ref.reshape(8, 4), ref)], tolerance=1.0)
    assert not report.passed
    assert "shape (8, 4)" in report.reason and "(4, 8)" in report.reason


def test_dtype_mismatch_is_rejected():
    ref = _ref(4, 8)
    report = compare_outputs([(ref.to(torch.float16), ref)], tolerance=1.0)
    assert not report.passed
    assert "float16" in report.reason and "float32" in report.reason


@pytest.mark.parametrize("out,word", [
    (lambda r: (r[0],), "sequence of 2"),                       # too few outputs
    (lambda r: r[0], "expected a sequence"),                   # a tensor for a tuple
    (lambda r: {"a": r[0], "b": r[1]}, "expected a sequence"),  # a dict for a tuple
    (lambda r: (r[0], 3), "expected a tensor"),                # a number for a tensor
])
def test_structure_mismatch_is_rejected(out, word):
    ref = (_ref(3), _ref(5, seed=1))
    report = compare_outputs([(out(ref), ref)], tolerance=1.0)
    assert not report.passed
    assert word in report.reason


def test_dict_keys_and_plain_values_are_compared():
    ref = {"y": _ref(3), "label": "cat", "n": 2}
    assert compare_outputs([({"y": ref["y"].clone(), "label": "cat", "n": 2}, ref)]).passed
    assert not compare_outputs([({"y": ref["y"], "label": "dog", "n": 2}, ref)]).passed
    missing = compare_outputs([({"y": ref["y"], "label": "cat"}, ref)])
    assert not missing.passed and "keys" in missing.reason


def test_tensor_where_eager_returned_a_plain_value_is_rejected():
    ref = (_ref(3), 2)
    report = compare_outputs([((ref[0], torch.tensor([2, 2])), ref)])
    assert not report.passed
    assert "output[1]" in report.reason


def test_report_round_trips_through_dict():
    ref = _ref(10)
    report = compare_outputs([(_scaled_noise(ref, 0.5), ref)])
    again = correctness.CorrectnessReport.from_dict(report.to_dict())
    assert again == report


# ----- timing ----------------------------------------------------------------------------------


class FakeClock:
    """Replaces the timer: each timed call 'takes' the next of a list of milliseconds."""

    def __init__(self, times_ms):
        self.times_ms = list(times_ms)
        self.index = 0
        self.now = 1000.0       # seconds

    def perf_counter(self):
        return self.now

    def time_once(self, fn, device, calls=1):
        for _ in range(calls):
            fn()
        ms = self.times_ms[self.index % len(self.times_ms)]
        self.index += 1
        self.now += ms * calls / 1e3
        return ms


@pytest.fixture
def fake_clock(monkeypatch):
    def install(times_ms):
        clock = FakeClock(times_ms)
        monkeypatch.setattr(timing, "_time_once", clock.time_once)
        monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
        return clock
    return install


CPU = torch.device("cpu")
#: Stop-rule tests time one call per burst and no single-call latency, so that calls can be counted.
ONE_BY_ONE = dict(cpu_burst_ms=0.0, latency_runs=0)


def test_stop_rule_stops_early_on_a_stable_function(fake_clock):
    clock = fake_clock([2.0, 2.01, 1.99])
    calls = []
    cfg = MeasureConfig(warmup_runs=2, min_runs=5, max_runs=100, max_cv=0.05, max_seconds=100.0, **ONE_BY_ONE)
    result = measure(lambda: calls.append(1), CPU, 1, cfg)
    assert result.runs == 5                       # min_runs, then the spread is already small
    assert len(calls) == 2 + 5                    # warm-up calls are not timed
    assert result.median_ms == pytest.approx(2.0, abs=0.011)


def test_stop_rule_runs_to_max_runs_on_a_noisy_function(fake_clock):
    fake_clock([1.0, 10.0])
    cfg = MeasureConfig(warmup_runs=0, min_runs=3, max_runs=40, max_cv=0.05, max_seconds=100.0)
    result = measure(lambda: None, CPU, 1, cfg)
    assert result.runs == 40
    assert result.cv > 0.5


def test_stop_rule_stops_at_max_seconds_on_a_noisy_function(fake_clock):
    times = [1.0, 30.0]
    clock = fake_clock(times)
    cfg = MeasureConfig(warmup_runs=0, min_runs=3, max_runs=10_000, max_cv=0.05, max_seconds=0.25, **ONE_BY_ONE)
    result = measure(lambda: None, CPU, 1, cfg)
    # The first run count (>= min_runs) whose total time is past the 250 ms budget.
    total, expected = 0.0, 0
    while True:
        total += times[expected % 2]
        expected += 1
        if expected >= cfg.min_runs and total > 250.0:
            break
    assert result.runs == expected
    assert result.runs < cfg.max_runs
    assert clock.now - 1000.0 == pytest.approx(total / 1e3)


def test_stop_rule_with_a_real_timer_honours_the_budget():
    flip = [0]

    def noisy():
        flip[0] ^= 1
        time.sleep(0.004 if flip[0] else 0.0)

    cfg = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=100_000, max_cv=0.01, max_seconds=0.15)
    started = time.perf_counter()
    result = measure(noisy, CPU, 1, cfg)
    elapsed = time.perf_counter() - started
    assert 3 <= result.runs < 100_000
    assert elapsed < 1.5


def test_median_p90_and_cv_from_known_times(fake_clock):
    # 1..101 ms in a scrambled order: median 51, p90 91, cv = pstdev / mean.
    times = [float(1 + (i * 37) % 101) for i in range(101)]
    assert sorted(times) == [float(v) for v in range(1, 102)]
    fake_clock(times)
    cfg = MeasureConfig(warmup_runs=0, min_runs=101, max_runs=101, max_cv=0.0, max_seconds=1e9)
    result = measure(lambda: None, CPU, 4, cfg)
    assert result.runs == 101
    assert result.median_ms == 51.0
    assert result.p90_ms == 91.0
    assert result.cv == pytest.approx(statistics.pstdev(times) / statistics.fmean(times))
    assert result.batch_size == 4
    assert result.throughput == pytest.approx(4 / 0.051)


def test_median_of_an_even_count_and_outliers(fake_clock):
    fake_clock([3.0, 1.0, 1000.0, 2.0])
    cfg = MeasureConfig(warmup_runs=0, min_runs=4, max_runs=4, max_cv=0.0, max_seconds=1e9)
    result = measure(lambda: None, CPU, 1, cfg)
    assert result.median_ms == 2.5            # one slow outlier does not move the median far
    assert result.p90_ms == 1000.0
    assert result.cv > 1.0


def test_timing_round_trips_through_dict():
    t = Timing(batch_size=8, median_ms=2.0, p90_ms=3.0, cv=0.1, runs=12)
    assert Timing.from_dict(t.to_dict()) == t
    assert t.throughput == pytest.approx(4000.0)
    assert MeasureConfig.from_dict(MeasureConfig(min_runs=7).to_dict()) == MeasureConfig(min_runs=7)


def _store(batch_sizes):
    samples = [Sample((torch.full((bs, 2), float(i)),), {"k": i}, None, bs) for i, bs in enumerate(batch_sizes)]
    return SampleStore(samples, calls_seen=len(samples))


def test_profile_samples_measures_every_recorded_batch_size(fake_clock):
    fake_clock([1.0])
    store = _store([1, 4, 4, 8, 1])
    seen = []

    def call(x, k):
        seen.append((x.shape[0], k))

    cfg = MeasureConfig(warmup_runs=1, min_runs=4, max_runs=4, max_seconds=1e9)
    timings = profile_samples(call, store, CPU, cfg)
    assert sorted(timings) == [1, 4, 8]
    assert all(timings[bs].batch_size == bs for bs in timings)
    assert all(timings[bs].runs == 4 for bs in timings)
    # Each batch size is timed on its own samples, cycling through all of them.
    assert {k for bs, k in seen if bs == 4} == {1, 2}
    assert {k for bs, k in seen if bs == 1} == {0, 4}
    assert {k for bs, k in seen if bs == 8} == {3}
    assert all(store.samples[k].batch_size == bs for bs, k in seen)


def test_profile_samples_times_each_batch_size_separately():
    store = _store([1, 6])

    def call(x, k):
        time.sleep(0.002 * x.shape[0])

    cfg = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=10, max_seconds=0.2)
    timings = profile_samples(call, store, CPU, cfg)
    assert timings[6].median_ms > 3 * timings[1].median_ms


def test_bursts_last_the_target_and_hold_a_few_calls_at_least(fake_clock, monkeypatch):
    cuda = torch.device("cuda")   # only its type is read: the clock and the synchronization are faked
    monkeypatch.setattr(timing, "_sync", lambda device: None)
    fake_clock([0.05])
    assert timing.burst_length(lambda: None, cuda, burst_ms=50.0) == 1000      # 50 ms of 0.05 ms calls
    assert timing.burst_length(lambda: None, cuda, burst_ms=50.0, max_burst=64) == 64
    fake_clock([25.0])
    assert timing.burst_length(lambda: None, cuda, burst_ms=50.0, min_burst=3) == 3   # long calls need few
    assert timing.burst_length(lambda: None, cuda, burst_ms=0) == 1                    # 0: one call at a time
    cfg = MeasureConfig()
    assert cfg.burst_target(cuda) == (50.0, 3) and cfg.burst_target(CPU) == (5.0, 1)
    fake_clock([0.1])
    monkeypatch.setattr(timing, "_event_ms", lambda fn, device, calls: None)
    calls = []
    cfg = MeasureConfig(warmup_runs=0, min_runs=4, max_runs=4, max_seconds=100.0, burst_ms=1.0, latency_runs=0)
    result = measure(lambda: calls.append(1), cuda, 1, cfg)
    # 1 probe call, a probe burst of a quarter burst (3), then 4 bursts of 10 (the CUDA-event cross-check
    # is faked away: no CUDA in CPU tests)
    assert len(calls) == 1 + 3 + 4 * 10
    assert result.runs == 4 and result.calls_per_burst == 10
    assert result.median_ms == pytest.approx(0.1)          # per call, not per burst


def test_a_burst_is_read_by_the_wall_clock_between_two_device_wide_synchronizes(monkeypatch):
    cuda = torch.device("cuda")
    events = []
    now = [0.0]
    monkeypatch.setattr(timing, "_sync", lambda device: events.append(("sync", device.type)))

    def call():
        events.append("call")
        now[0] += 0.002

    def clock():
        events.append("clock")
        return now[0]

    with timing.use_clock(clock):
        ms = timing._time_once(call, cuda, 3)
    assert events == [("sync", "cuda"), "clock", "call", "call", "call", ("sync", "cuda"), "clock"]
    assert ms == pytest.approx(2.0)


def test_a_burst_that_recompiled_is_timed_again_and_counted(fake_clock, monkeypatch):
    fake_clock([1.0])
    compiles = iter([0, 1, 1, 1] + [1] * 1000)      # the first burst sees one compile, the rest none
    monkeypatch.setattr(timing, "_compiles", lambda: next(compiles))
    cfg = MeasureConfig(warmup_runs=0, min_runs=3, max_runs=3, max_seconds=100.0, **ONE_BY_ONE)
    result = measure(lambda: None, CPU, 1, cfg)
    assert result.recompiles == 1 and result.runs == 3


def test_measure_reports_single_call_latency_apart_from_the_serving_loop(fake_clock):
    fake_clock([2.0, 2.0, 2.0, 4.0])
    cfg = MeasureConfig(warmup_runs=0, min_runs=4, max_runs=4, max_seconds=100.0, cpu_burst_ms=0.0, latency_runs=4)
    result = measure(lambda: None, CPU, 1, cfg)
    assert result.latency_p50_ms is not None and result.latency_p90_ms >= result.latency_p50_ms
    assert result.event_ms is None       # CUDA events only on a GPU


def test_side_by_side_rounds_are_paired_shuffled_and_reproducible():
    from aitune_ray.measure.timing import profile_side_by_side

    store = _store([2, 2, 4])
    order = []
    now = [0.0]

    def make(name, ms):
        def call(x, k):
            order.append((name, x.shape[0]))
            now[0] += ms * x.shape[0] / 1e3
        return call

    def timed_calls(log):   # each size's calls less its 3 warm-up calls
        return [c for bs in (2, 4) for c in [c for c in log if c[1] == bs][3:]]

    calls = {"eager": make("eager", 1.0), "a": make("a", 0.5), "b": make("b", 2.0)}
    cfg = MeasureConfig(warmup_runs=1, cpu_burst_ms=0.0)
    with timing.use_clock(lambda: now[0]):
        timed = profile_side_by_side(calls, store, CPU, rounds=12, config=cfg, seed=3)
        timed_order = timed_calls(order)
        order.clear()
        again = profile_side_by_side(calls, store, CPU, rounds=12, config=cfg, seed=3)
    assert timed_calls(order) == timed_order                     # the same seed, the same orders
    rounds = [tuple(n for n, bs in timed_order[i:i + 3]) for i in range(0, len(timed_order), 3)]
    assert all(sorted(r) == ["a", "b", "eager"] for r in rounds)  # every call once per round and size
    assert len(set(rounds)) > 1                                   # in orders that change
    for name in calls:
        for bs in (2, 4):
            assert len(timed[name][bs].rounds_ms) == 12 == timed[name][bs].runs
    assert timed["a"][4].median_ms == pytest.approx(2.0) and timed["b"][2].median_ms == pytest.approx(4.0)
    assert again["a"][4].rounds_ms == pytest.approx(timed["a"][4].rounds_ms)


def test_side_by_side_runs_one_batch_size_at_a_time_after_untimed_load():
    """A serving loop runs one batch size back to back: all rounds of a size follow one another, each
    size's after settle_ms of untimed load, the calls in turn, and that load is in no timing."""
    from aitune_ray.measure.timing import profile_side_by_side

    store = _store([2, 4])
    log = []
    now = [0.0]

    def make(name, ms):
        def call(x, k):
            log.append((name, x.shape[0], now[0]))
            now[0] += ms / 1e3
        return call

    calls = {"eager": make("eager", 1.0), "a": make("a", 3.0)}
    cfg = MeasureConfig(warmup_runs=1, cpu_burst_ms=0.0, cpu_settle_ms=40.0)
    with timing.use_clock(lambda: now[0]):
        timed = profile_side_by_side(calls, store, CPU, rounds=5, config=cfg)
    first, log = log[:4], log[4:]
    assert [(n, b) for n, b, _ in first] == [("eager", 2), ("a", 2), ("eager", 4), ("a", 4)]   # every size seen
    sizes = [bs for _, bs, _ in log]
    assert sizes == sorted(sizes)                                 # then every call at 2 before any at 4
    for bs in (2, 4):
        at = [(name, t) for name, b, t in log if b == bs]
        settle = at[2:-10]                                        # less the warm-ups and the 5 rounds of 2 calls
        assert [n for n, _ in settle[:4]] == ["eager", "a", "eager", "a"]   # the calls in turn
        assert settle[-1][1] - settle[0][1] >= 40e-3 - 4e-3       # for the settle time, give or take a pass
        assert len(settle) == 2 * 10                              # 10 passes of 4 ms reach 40 ms
        assert timed["eager"][bs].rounds_ms == pytest.approx([1.0] * 5)
        assert timed["a"][bs].rounds_ms == pytest.approx([3.0] * 5)


class _LazyCompiled:
    """Stands for torch.compile restored from its recipe, with automatic dynamic shapes: fast at the first
    batch size it sees (a graph with that size fixed) until it sees a second size; from then on one dynamic
    graph serves every size, slower at the first one."""

    def __init__(self, clock, static_ms=1.0, dynamic_ms=1.3):
        self.clock, self.static_ms, self.dynamic_ms = clock, static_ms, dynamic_ms
        self.seen = []

    def __call__(self, x, k):
        if x.shape[0] not in self.seen:
            self.seen.append(x.shape[0])
        self.clock[0] += (self.static_ms if len(self.seen) == 1 else self.dynamic_ms) / 1e3


def test_a_lazily_compiled_backend_is_timed_at_every_size_as_it_serves_once_it_has_seen_them_all():
    from aitune_ray.measure.timing import profile_samples, profile_side_by_side

    store = _store([2, 4])
    now = [0.0]
    cfg = MeasureConfig(warmup_runs=1, cpu_burst_ms=0.0, min_runs=3, max_runs=3, latency_runs=0)

    def eager(x, k):
        now[0] += 1.2e-3

    with timing.use_clock(lambda: now[0]):
        restored = _LazyCompiled(now)
        timed = profile_side_by_side({"eager": eager, "restored": restored}, store, CPU, rounds=5, config=cfg)
        assert timed["restored"][2].rounds_ms == pytest.approx([1.3] * 5)   # not 1.0: that graph is gone
        assert timed["restored"][4].rounds_ms == pytest.approx([1.3] * 5)
        alone = profile_samples(_LazyCompiled(now), store, CPU, cfg)
        assert alone[2].median_ms == pytest.approx(1.3) and alone[4].median_ms == pytest.approx(1.3)


def test_torch_compile_serves_the_first_size_from_the_dynamic_graph_in_the_timed_rounds():
    """The real thing: torch.compile (automatic dynamic shapes) restored as a JIT backend is, before any
    timing: its compiled graphs, counted by a backend that records which one each call ran."""
    from aitune_ray.measure.timing import profile_side_by_side

    graphs, hits = [], []

    def counting(gm, example_inputs):
        index = len(graphs)
        graphs.append(any(isinstance(v, torch.SymInt) for v in example_inputs))

        def run(*args):
            hits.append(index)
            return gm.forward(*args)
        return run

    torch._dynamo.reset()
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    compiled = torch.compile(module, backend=counting)
    samples = [Sample((torch.randn(bs, 4),), {}, None, bs) for bs in (2, 8)]
    store = SampleStore(samples, calls_seen=len(samples))
    cfg = MeasureConfig(warmup_runs=1, cpu_burst_ms=0.0, latency_runs=0)
    profile_side_by_side({"restored": compiled}, store, CPU, rounds=4, config=cfg)
    assert graphs == [False, True]           # the first size fixed, then a dynamic batch dimension
    # the static graph ran once, when every size was first seen; every later call, at either size, ran the
    # dynamic one, as it will when deployed
    assert hits.count(0) == 1 and set(hits[1:]) == {1}
    torch._dynamo.reset()
