"""aitune_ray.dataloader as AITune has it: samples of different shapes in a DynamicShapeDataset (or made by
MinMaxRandomDataset from InputConfigs) are batched one sample per batch, repeated, and tune() records every
shape, so the backend is built for the dynamic dimensions' range: a tiny BERT tuned on a dataset of variable
sequence lengths runs a length it never saw on the chosen ONNX Runtime graph."""

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_ray.dataloader import (DataLoaderFactory, DynamicShapeDataset, InputConfig, MinMaxRandomDataset,
                                   SingleBatchDatasetWrapper, ensure_enough_samples, samples_generator)
from aitune_ray.errors import DatasetError
from tests.helpers import FAST_MEASURE


def shapes(dataset, batch_sizes, name=None):
    return [(size, tuple((kwargs[name] if name else args[0]).shape))
            for size, args, kwargs in samples_generator(dataset, batch_sizes)]


def test_each_batch_of_a_dynamic_shape_dataset_is_one_sample_repeated():
    small, large = torch.randn(10, 10), torch.randn(20, 20)
    dataset = DynamicShapeDataset([small, large])
    assert shapes(dataset, [4, 8]) == [(4, (4, 10, 10)), (4, (4, 20, 20)), (8, (8, 10, 10)), (8, (8, 20, 20))]
    (size, args, _), *_ = samples_generator(dataset, [3])
    assert all(torch.equal(row, small) for row in args[0])
    named = DynamicShapeDataset([{"input": small}, {"input": large}])
    assert shapes(named, [2], "input") == [(2, (2, 10, 10)), (2, (2, 20, 20))]


def test_min_max_random_dataset_starts_at_the_minimum_and_maximum_and_stays_within_them():
    dataset = MinMaxRandomDataset(6, [InputConfig((3, 4, 4), (3, 9, 9), kwarg_name="image")],
                                  generator=torch.Generator().manual_seed(0))
    assert len(dataset) == 6 and isinstance(dataset, DynamicShapeDataset)
    got = [tuple(sample["image"].shape) for sample in dataset]
    assert got[:2] == [(3, 4, 4), (3, 9, 9)]
    assert all(s[0] == 3 and 4 <= s[1] <= 9 and 4 <= s[2] <= 9 for s in got)
    assert all(0 <= float(sample["image"].min()) and float(sample["image"].max()) <= 1 for sample in dataset)
    positional = MinMaxRandomDataset(2, [InputConfig((2,)), InputConfig((5,), dtype=torch.long, max_value=7)])
    assert [tuple(t.shape) for t in positional[1]] == [(2,), (5,)]
    assert positional[0][1].dtype == torch.long and int(positional[0][1].max()) <= 7


def test_input_config_and_min_max_random_dataset_refuse_what_aitune_refuses():
    assert InputConfig((3, 24, 24), kwarg_name="x").max_input == (3, 24, 24)
    with pytest.raises(DatasetError, match="at least 2"):
        MinMaxRandomDataset(1, [InputConfig((2,))])
    assert len(MinMaxRandomDataset(1, [InputConfig((2,))], include_min_max_shapes=False)) == 1
    with pytest.raises(DatasetError, match="either a kwarg_name or none"):
        MinMaxRandomDataset(2, [InputConfig((2,), kwarg_name="a"), InputConfig((2,))])
    with pytest.raises(DatasetError, match="above max_input"):
        InputConfig((5,), (3,))


def test_a_plain_list_of_different_shapes_is_refused_naming_dynamic_shape_dataset():
    with pytest.raises(DatasetError, match="DynamicShapeDataset"):
        list(samples_generator([torch.randn(4), torch.randn(5)], [2]))


def test_samples_generator_ensure_enough_samples_and_the_single_batch_wrapper():
    dataset = [{"prompt": "Hello, world!"} for _ in range(10)]
    assert [(size, len(kwargs["prompt"])) for size, _, kwargs in samples_generator(dataset, [4, 8], 1)] == [
        (4, 4), (8, 8)]
    assert shapes(torch.randn(10, 10), [1, 2]) == [(1, (1, 10, 10)), (2, (2, 10, 10))]
    assert ensure_enough_samples([1, 2, 3], 5) == [1, 2, 3, 1, 2]
    factory = ensure_enough_samples(DataLoaderFactory([torch.ones(2)], num_workers=0), 3)
    assert isinstance(factory, DataLoaderFactory) and len(factory.dataset) == 3
    with pytest.raises(DatasetError):
        ensure_enough_samples([1], 0)
    wrapped = SingleBatchDatasetWrapper(["a", "b"], 5)
    assert len(wrapped) == 5 and [wrapped[i] for i in range(5)] == ["a", "b", "a", "b", "a"]


transformers = pytest.importorskip("transformers")


def test_a_bert_tuned_on_variable_sequence_lengths_runs_an_unseen_length_on_the_chosen_graph():
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=64)
    bert = transformers.BertModel(config).eval()
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False)),
                                      measure_config=FAST_MEASURE).enable_performance_validation("disabled")
    model = ait.Module(bert, name="bert", strategy=strategy)
    dataset = MinMaxRandomDataset(3, [InputConfig((4,), (12,), dtype=torch.long, kwarg_name="input_ids",
                                                  min_value=0, max_value=99)],
                                  generator=torch.Generator().manual_seed(1))
    lengths = [int(sample["input_ids"].shape[0]) for sample in dataset]

    report = ait.tune(lambda input_ids: model(input_ids=input_ids), dataset, batch_sizes=[1, 2], device="cpu",
                      executor=ait.InlineExecutor(remeasure_rounds=2))

    assert report.failures == {}
    assert model.state == ait.ModuleState.TUNED
    recorded = [tuple(sample.kwargs["input_ids"].shape) for sample in model.samples]
    assert recorded == [(size, length) for size in (1, 2) for length in lengths]
    assert isinstance(model.backend, ONNXRuntimeBackend)
    ids = torch.randint(0, 100, (3, 7))                 # neither a recorded length nor a recorded batch size
    eager_calls = []
    hook = bert.embeddings.register_forward_pre_hook(lambda module, args: eager_calls.append(1))
    with torch.no_grad():
        got = model(input_ids=ids)
    hook.remove()
    assert eager_calls == []                            # the graph ran it, not eager
    with torch.no_grad():
        want = bert(input_ids=ids)
    assert torch.allclose(got.last_hidden_state, want.last_hidden_state, atol=1e-4)
