"""Dataset items batched as AITune's collator batches them: a dict's label / label_ids passed as labels (as
transformers' default collator does), None values left out, (args, kwargs) items batched item by item, and
DataLoaderFactory's loader yielding AITune's batch forms with AITune's default collate_fn."""

import torch

import aitune_ray as ait
from aitune_ray.model.dataloader import batches, default_data_collator


def test_label_and_label_ids_are_passed_as_labels_and_none_values_left_out():
    items = [{"x": torch.randn(3), "label": 1, "mask": None}, {"x": torch.randn(3), "label": 0, "mask": None}]
    ((size, args, kwargs),) = list(batches(items, [2]))
    assert size == 2 and args == [] and sorted(kwargs) == ["labels", "x"]
    assert kwargs["labels"].dtype == torch.long and kwargs["labels"].tolist() == [1, 0]

    ids = [{"x": torch.randn(3), "label_ids": [0.5, 1.5]} for _ in range(2)]
    ((_, _, kwargs),) = list(batches(ids, [2]))
    assert kwargs["labels"].dtype == torch.float and kwargs["labels"].shape == (2, 2) and "label_ids" not in kwargs


def test_args_kwargs_items_are_batched_item_by_item():
    items = [((torch.full((3,), float(i)), torch.full((2,), -float(i))), {"k": torch.full((4,), 10.0 * i),
                                                                         "label": i}) for i in range(4)]
    ((size, args, kwargs),) = list(batches(items, [4], 1))
    assert size == 4 and len(args) == 2
    assert args[0][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0] and args[1].shape == (4, 2)
    assert kwargs["k"][:, 0].tolist() == [0.0, 10.0, 20.0, 30.0] and kwargs["labels"].tolist() == [0, 1, 2, 3]


def test_create_dataloader_yields_aitune_batch_forms_with_its_default_collate_fn():
    tensors = ait.DataLoaderFactory([torch.randn(3) for _ in range(4)])
    assert tensors.collate_fn is default_data_collator
    batch = next(iter(tensors.create_dataloader(2)))
    assert isinstance(batch, list) and len(batch) == 1 and batch[0].shape == (2, 3)

    dicts = ait.DataLoaderFactory([{"x": torch.randn(3)} for _ in range(2)])
    batch = next(iter(dicts.create_dataloader(2)))
    assert type(batch) is dict and batch["x"].shape == (2, 3)

    pairs = ait.DataLoaderFactory([((torch.randn(3),), {"y": torch.randn(2)}) for _ in range(2)])
    args, kwargs = next(iter(pairs.create_dataloader(2)))
    assert isinstance(args, list) and args[0].shape == (2, 3) and kwargs["y"].shape == (2, 2)

    texts = ait.DataLoaderFactory(["a", "b"])
    assert next(iter(texts.create_dataloader(2))) == [["a", "b"]]


def test_a_transformers_classifier_gets_labels_from_a_label_column():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(config).eval()
    model.bert.encoder = ait.Module(model.bert.encoder, name="encoder")
    seen = {}

    def call(**kwargs):
        seen.update(kwargs)
        return model(**kwargs)

    data = [{"input_ids": torch.randint(0, 50, (8,)), "label": i % 2} for i in range(2)]
    ait.tune(call, data, batch_sizes=[2], dry_run=True)
    assert "labels" in seen and "label" not in seen and seen["labels"].tolist() == [0, 1]
    assert len(model.bert.encoder.samples) == 1
