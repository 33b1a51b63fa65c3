"""The actors per GPU that RayExecutor picks by default (aitune_ray.cluster.layout), and when it picks."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ray")

from aitune_ray.cluster import RayExecutor, TuneContext  # noqa: E402
from aitune_ray.cluster import layout  # noqa: E402
from aitune_ray.records.results import CandidateJob  # noqa: E402
from aitune_ray.model.samples import Sample, SampleStore  # noqa: E402

GIB = 2**30
H200 = 141 * GIB


def choose(**facts) -> layout.Layout:
    args = {"job_bytes": GIB // 4, "gpu_bytes": H200, "gpus": 2, "cpus": 32, "builds": 4, **facts}
    return layout.choose(**args)


def test_a_small_model_with_more_builds_than_gpus_gets_two_actors_per_gpu():
    chosen = choose()
    assert chosen.actors_per_gpu == 2 and chosen.gpus_per_actor == 0.5
    assert "4 builds for 2 GPU(s)" in chosen.reason and "side by side" in chosen.reason


def test_the_one_gpu_of_the_driver_gets_one_actor_which_builds_beside_the_drivers_profile():
    chosen = choose(gpus=1, cpus=16, builds=9)
    assert chosen.actors_per_gpu == 1
    assert "the driver times on too" in chosen.reason and "beside the driver's baseline and profile" in chosen.reason


@pytest.mark.parametrize("facts, words", [
    ({"builds": 2}, "2 build(s) for 2 GPU(s)"),
    ({"builds": 8, "gpus": 8}, "8 build(s) for 8 GPU(s)"),
    ({"cpus": 12}, "12 CPUs are too few for 4 actors"),
    ({"cpus": 30, "gpus": 4, "builds": 9}, "30 CPUs are too few for 8 actors"),
    ({"job_bytes": 14 * GIB}, "would need about 116.0 GiB beside the driver's 16.0 GiB, over 80% of a GPU's 141.0 GiB"),   # a 7B model in fp16
    ({"job_bytes": 2 * GIB, "gpu_bytes": 24 * GIB}, "over 80% of a GPU's 24.0 GiB"),
    ({"gpus": 0}, "no GPU"),
])
def test_one_actor_per_gpu_when_sharing_would_not_pay_or_not_fit(facts, words):
    chosen = choose(**facts)
    assert chosen.actors_per_gpu == 1 and chosen.gpus_per_actor == 1.0
    assert words in chosen.reason, chosen.reason


def test_the_memory_rule_sits_where_two_actors_and_the_driver_fill_the_usable_memory():
    """Two actors of COPIES copies and a base each, beside the driver's copy and base, within USABLE."""
    base, copies, usable = layout.ACTOR_BASE_BYTES, layout.COPIES, layout.USABLE
    fits = int((usable * H200 - 3 * base) / (2 * copies + 1))   # the largest job that fits
    assert choose(job_bytes=fits - GIB // 64).actors_per_gpu == 2
    assert choose(job_bytes=fits + GIB // 64).actors_per_gpu == 1


def test_tensor_bytes_counts_a_shared_storage_once():
    weight = torch.zeros(256, 64)
    view = weight[:128]
    assert layout.tensor_bytes([weight, view, torch.zeros(10, dtype=torch.float16)]) == 256 * 64 * 4 + 20


def _context(tmp_path, device="cuda") -> TuneContext:
    module = torch.nn.Linear(64, 64)
    samples = SampleStore([Sample((torch.randn(4, 64),), {}, torch.randn(4, 64), 4)])
    return TuneContext("m", module, samples, torch.device(device), workdir=tmp_path)


def _jobs(n: int) -> list[CandidateJob]:
    return [CandidateJob(key=f"k{i}", spec={"type": "x", "config": {}}) for i in range(n)]


class _NotStarting:
    """Stands for the thread open() starts Ray on: nothing starts, and the start is never done."""

    def __init__(self, start, what):
        pass

    def done(self) -> bool:
        return False


def _local_executor(monkeypatch, gpus=1, **kwargs) -> RayExecutor:
    """A RayExecutor as open() leaves it when it starts Ray here on a machine of gpus H200s (Ray's start
    itself left out)."""
    from aitune_ray.cluster import session

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(session, "Background", _NotStarting)
    monkeypatch.setattr(layout, "local_gpu_bytes", lambda: H200)
    monkeypatch.setattr(layout, "local_cpus", lambda: 16 * gpus)
    executor = RayExecutor(**kwargs)
    executor.open()
    assert executor.session.local and executor.session.local_gpus == gpus
    return executor


def test_the_first_batch_on_a_ray_started_here_sets_the_layout_and_a_later_one_does_not(monkeypatch, tmp_path):
    executor = _local_executor(monkeypatch, gpus=2)
    assert executor.gpus_per_actor == 1.0 and executor.layout is None
    executor.session.choose_layout(_context(tmp_path), _jobs(4))
    assert executor.layout.actors_per_gpu == 2 and executor.gpus_per_actor == 0.5
    assert executor.session.pool_shape(2.0, 32.0) == (4, 0.5) and executor.actors_share_gpus()
    executor.session.choose_layout(_context(tmp_path), _jobs(1))      # a second module's batch changes nothing
    executor.session.close_layout("the pool is made")
    assert executor.gpus_per_actor == 0.5 and executor.layout.actors_per_gpu == 2


def test_on_one_gpu_the_first_batch_gets_one_actor_which_takes_turns_with_the_driver(monkeypatch, tmp_path):
    executor = _local_executor(monkeypatch)
    executor.session.choose_layout(_context(tmp_path), _jobs(4))
    assert executor.layout.actors_per_gpu == 1 and executor.gpus_per_actor == 1.0
    assert executor.session.pool_shape(1.0, 16.0) == (1, 1.0)
    assert executor.session.on_one_gpu() and executor.actors_share_gpus()   # the driver times eager there, taking its turn


def test_a_pool_made_before_any_batch_came_has_one_actor_per_gpu_and_says_why(monkeypatch, tmp_path):
    executor = _local_executor(monkeypatch)
    executor.session.close_layout("no batch had come when Ray was up")
    executor.session.choose_layout(_context(tmp_path), _jobs(4))
    assert executor.gpus_per_actor == 1.0
    assert executor.layout.actors_per_gpu == 1 and executor.layout.reason == "no batch had come when Ray was up"
    assert executor.session.pool_shape(1.0, 16.0) == (1, 1.0)


@pytest.mark.parametrize("kwargs, local, device", [
    ({"gpus_per_actor": 1}, True, "cuda"),       # the user's layout
    ({"max_actors": 1}, True, "cuda"),           # capped at one actor per GPU
    ({}, False, "cuda"),                         # a Ray it joined: its GPUs' memory is not known here
    ({}, True, "cpu"),                           # tuning for the CPU
])
def test_the_executor_picks_only_on_a_ray_it_started_for_a_cuda_job_left_to_it(monkeypatch, tmp_path, kwargs, local,
                                                                               device):
    executor = _local_executor(monkeypatch, **kwargs)
    executor.session.local = local
    executor.session.choose_layout(_context(tmp_path, device), _jobs(4))
    assert executor.gpus_per_actor == 1.0
    assert executor.layout is None or executor.layout.actors_per_gpu == 1


def test_the_model_and_its_samples_are_what_the_memory_rule_weighs(monkeypatch, tmp_path):
    seen = {}
    real = layout.choose
    monkeypatch.setattr(layout, "choose", lambda **facts: seen.update(facts) or real(**facts))
    executor = _local_executor(monkeypatch, gpus=2)
    context = _context(tmp_path)
    executor.session.choose_layout(context, _jobs(3))
    weights = (64 * 64 + 64) * 4
    assert seen == {"job_bytes": weights + 2 * 4 * 64 * 4, "gpu_bytes": H200, "gpus": 2, "cpus": 32, "builds": 3}
    assert executor.layout.actors_per_gpu == 2 and executor.session.pool_shape(2.0, 32.0) == (4, 0.5)


@pytest.mark.parametrize("size, share, shares, first", [
    (2, 0.5, [0.501, 0.499], 1),                        # one GPU: one actor at once, the other after
    (4, 0.5, [0.501, 0.501, 0.499, 0.499], 2),          # two GPUs: one on each, then one more on each
    (3, 0.5, [0.501, 0.501, 0.499], 2),
    (1, 0.5, [0.5], 1),
    (4, 1.0, [1.0] * 4, 4), (3, 0.0, [0.0] * 3, 3),     # GPUs not shared, CPU actors: all at once
    (6, 1 / 3, [1 / 3] * 6, 6),                         # three per GPU: all at once, as asked
])
def test_actors_that_share_gpus_start_one_per_gpu_then_the_rest_in_shares_that_fill_each_gpu(size, share, shares,
                                                                                               first):
    got, wave = layout.start_shares(size, share)
    assert got == pytest.approx(shares) and wave == first
    if wave < size:
        assert got[0] > 0.5                                   # no two of the first wave fit on one GPU
        assert got[0] + got[-1] <= 1.0 and round((got[0] + got[-1]) * 1e4) == 1e4   # a later one fills it
