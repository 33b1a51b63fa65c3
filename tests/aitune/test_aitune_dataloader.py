"""AITune 0.6.0's unit tests of aitune.torch.dataloader (tests/unit/torch/test_dataloader.py), ported: the same
datasets and assertions, `aitune.torch` read as `aitune_ray`."""

import numpy as np
import pytest
import torch

from aitune_ray.dataloader import (DataLoaderFactory, DatasetLike, InputConfig, MinMaxRandomDataset,
                                   ensure_enough_samples, samples_generator)


def tuning_loop(dataset: DatasetLike, batch_sizes: list[int]) -> list:
    return list(samples_generator(dataset, batch_sizes))


def first(samples):
    return samples[0]


def image_and_labels() -> list[InputConfig]:
    """A 3-channel image from 24 to 48 pixels a side as `input`, and a one-element `labels`."""
    return [InputConfig(min_input=(3, 24, 24), max_input=(3, 48, 48), kwarg_name="input"),
            InputConfig(min_input=(1,), max_input=(1,), kwarg_name="labels")]


def test_simple_sequence_map():
    samples = tuning_loop([{"input": torch.randn(3, 24, 24), "labels": torch.randint(0, 10, (1,))}
                           for _ in range(10)], [4])
    assert len(samples) == 2
    bs, args, kwargs = first(samples)
    assert (bs, len(args), len(kwargs)) == (4, 0, 2)
    assert kwargs["input"].shape == (4, 3, 24, 24)
    assert kwargs["labels"].shape == (4, 1)


def test_simple_sequence_tensors():
    samples = tuning_loop([torch.randn(3, 24, 24) for _ in range(10)], [4])
    assert len(samples) == 2
    bs, args, kwargs = first(samples)
    assert (bs, len(kwargs), len(args)) == (4, 0, 1)
    assert args[0].shape == (4, 3, 24, 24)


def test_simple_sequence_strings():
    samples = tuning_loop(["random string"] * 10, [4])
    assert len(samples) == 2
    bs, args, kwargs = first(samples)
    assert (bs, len(kwargs), len(args)) == (4, 0, 1)
    assert len(args[0]) == 4


def test_simple_mapping_strings():
    samples = tuning_loop([{"input": "random string"} for _ in range(10)], [4])
    assert len(samples) == 2
    bs, args, kwargs = first(samples)
    assert (bs, len(args)) == (4, 0)
    assert len(kwargs["input"]) == 4


def test_resnet_dataset_synthetic():
    dataset = [{"pixel_values": torch.rand(3, 224, 224), "labels": torch.randint(0, 1000, (1,)).item()}
               for _ in range(100)]
    samples = tuning_loop(dataset, [4])
    assert len(samples) == 25
    bs, args, kwargs = first(samples)
    assert (bs, len(args), len(kwargs)) == (4, 0, 2)
    assert len(kwargs["pixel_values"]) == 4
    assert kwargs["pixel_values"].shape == (4, 3, 224, 224)
    assert kwargs["labels"].shape == (4,)


def test_dynamic_shapes():
    dataset = MinMaxRandomDataset(25, image_and_labels(), include_min_max_shapes=False)
    samples = tuning_loop(dataset, [4])
    assert len(samples) == 25
    bs, args, kwargs = first(samples)
    assert (bs, len(args), len(kwargs)) == (4, 0, 2)
    assert len(kwargs["input"]) == 4
    assert kwargs["input"].shape[:2] == (4, 3)
    assert kwargs["input"].shape[2] in range(24, 49) and kwargs["input"].shape[3] in range(24, 49)
    assert kwargs["labels"].shape[0] == 4


def test_dynamic_shapes_with_min_max_only():
    dataset = MinMaxRandomDataset(2, image_and_labels(), include_min_max_shapes=True)
    samples = tuning_loop(dataset, [4])
    assert len(samples) == 2
    for (bs, args, kwargs), side in zip(samples, (24, 48)):
        assert (bs, len(args), len(kwargs)) == (4, 0, 2)
        assert len(kwargs["input"]) == 4
        assert kwargs["input"].shape == (4, 3, side, side)
    assert samples[0][2]["labels"].shape[0] == 4


def test_dynamic_shapes_number_of_samples_fails():
    image = image_and_labels()[:1]
    MinMaxRandomDataset(1, image, include_min_max_shapes=False)   # one sample is enough without the min and max
    with pytest.raises(ValueError, match="num_samples must be at least 2"):
        MinMaxRandomDataset(1, image, include_min_max_shapes=True)


def test_dynamic_shapes_fails():
    with pytest.raises(ValueError, match="All input configs must have either a kwarg_name or none"):
        MinMaxRandomDataset(2, [image_and_labels()[0], InputConfig(min_input=(1,), max_input=(1,))],
                            include_min_max_shapes=False)


@pytest.mark.skip(reason="needs GPT-2's tokenizer and a dataset from the Hugging Face hub (no network in CI)")
def test_llm_padding_collator():
    """AITune's test tokenizes 100 prompts with GPT-2's tokenizer and batches them with transformers'
    DataCollatorWithPadding through DataLoaderFactory(collate_fn=...)."""


def test_custom_dataloader_shuffled_dataset():
    dataset = [{"input": torch.ones(3, 24, 24) * i, "labels": torch.randint(0, 10, (1,))} for i in range(100)]

    class Shuffled(DataLoaderFactory):
        custom_used = False

        def create_dataloader(self, batch_size):
            self.custom_used = True
            return torch.utils.data.DataLoader(self.dataset, batch_size=batch_size, shuffle=True, num_workers=0)

    factory = Shuffled(dataset)
    bs, args, kwargs = first(tuning_loop(factory, [4]))
    assert (bs, len(args), len(kwargs)) == (4, 0, 2)
    assert kwargs["input"].shape == (4, 3, 24, 24)
    assert kwargs["labels"].shape == (4, 1)
    assert factory.custom_used


def test_torch_stack_dataset():
    dataset = torch.utils.data.StackDataset([torch.randn(3, 4, 4) for _ in range(4)])
    samples = list(samples_generator(dataset, batch_sizes=[1, 2, 4], max_num_batches_per_batch_size=1))
    assert len(samples) == 3
    for (bs, args, kwargs), size in zip(samples, (1, 2, 4)):
        assert (bs, len(args), len(kwargs)) == (size, 1, 0)
        assert args[0].shape == (size, 3, 4, 4)


def test_dataset_label_tensor():
    bs, args, kwargs = first(tuning_loop([{"label": i} for i in range(10)], [4]))
    assert (bs, len(args), len(kwargs)) == (4, 0, 1)
    assert "labels" in kwargs and "label" not in kwargs
    assert kwargs["labels"].shape == (4,)
    assert kwargs["labels"].tolist() == [0, 1, 2, 3]


def test_dataset_label_tensor_with_label_ids_tensor():
    bs, args, kwargs = first(tuning_loop([{"label_ids": torch.randint(0, 10, (1,))} for _ in range(10)], [4]))
    assert (bs, len(args), len(kwargs)) == (4, 0, 1)
    assert "labels" in kwargs and "label_ids" not in kwargs


def test_dataset_label_tensor_with_label_ids_ints():
    bs, args, kwargs = first(tuning_loop([{"label_ids": [i, i, i]} for i in range(10)], [4]))
    assert (bs, len(args), len(kwargs)) == (4, 0, 1)
    assert "labels" in kwargs and "label_ids" not in kwargs


def test_single_tensor_dataset():
    samples = tuning_loop(torch.randn(3, 24, 24), [4, 8])
    for (bs, args, kwargs), size in zip(samples, (4, 8)):
        assert (bs, len(args), len(kwargs)) == (size, 1, 0)
        assert args[0].shape == (size, 3, 24, 24)


def test_dataloader_sample_as_dict():
    dataset = [{"audio": {"path": "0d38672e0bbdbdc460af55b8bb84a15b", "sampling_rate": 16000,
                          "array": np.array([0.00238037, 0.0020752, 0.00198364, 0.00024414, 0.00048828, 0.0005188])}}]
    bs, args, kwargs = first(tuning_loop(dataset, [4]))
    assert (bs, len(args), len(kwargs)) == (4, 0, 1)
    assert {"path", "array", "sampling_rate"} <= set(kwargs["audio"])
    assert [len(kwargs["audio"][k]) for k in ("path", "array", "sampling_rate")] == [4, 4, 4]


def test_ensure_enough_samples_tensor():
    dataset = ensure_enough_samples(torch.ones(3, 24, 24), 10)
    assert len(dataset) == 10
    assert all(s.shape == (3, 24, 24) for s in dataset)


def test_ensure_enough_samples_iterable():
    dataset = ensure_enough_samples([{"input": torch.ones(3, 24, 24), "labels": torch.randint(0, 10, (1,))}], 10)
    assert len(dataset) == 10
    assert all("input" in s and "labels" in s for s in dataset)


def test_ensure_enough_samples_torch_dataset():
    assert len(ensure_enough_samples(torch.utils.data.TensorDataset(torch.randn(3, 24, 24)), 10)) == 10


def test_ensure_enough_samples_dataloader_factory():
    factory = DataLoaderFactory([{"input": torch.ones(3, 24, 24), "labels": torch.randint(0, 10, (1,))}])
    dataset = ensure_enough_samples(factory, 10).dataset
    assert len(dataset) == 10
    assert all("input" in s and "labels" in s for s in dataset)


def test_ensure_enough_samples_empty_dataset():
    assert ensure_enough_samples([], 10) == []
