"""Hugging Face calling conventions through the backends: keywords in any order, non-tensor keywords
(floats, bools, None, use_cache=False), return_dict True and False, and outputs returned as the classes the
model returns (a ModelOutput, so out.logits works), after a build and after a checkpoint round trip.

Tiny `transformers` models from configs with random weights (nothing is downloaded), recorded through
aitune_ray.Module as a user's calls are, built by ONNX Runtime (CPU) and Inductor JIT."""

import collections
import json
import logging

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import ONNXRuntimeBackend, ONNXRuntimeBackendConfig, TorchInductorJitBackend
from aitune_ray.measure.correctness import compare_outputs
from aitune_ray.model.recording import ModuleState

transformers = pytest.importorskip("transformers")

CPU = torch.device("cpu")
VOCAB = 100


def tiny_bert():
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64)
    return transformers.BertForSequenceClassification(config).eval()


def tiny_gpt2():
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=VOCAB, n_positions=64,
                                     use_cache=False)
    return transformers.GPT2LMHeadModel(config).eval()


def tiny_t5_encoder():
    config = transformers.T5Config(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=VOCAB)
    return transformers.T5EncoderModel(config).eval()


def tiny_vit():
    config = transformers.ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return transformers.ViTModel(config).eval()


class Scaled(nn.Module):
    """A net called with a float and a bool keyword, as users' own modules are."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, scale=1.0, flag=False):
        y = self.linear(x) * scale
        return {"y": y + 1.0 if flag else y}


def text_calls(batch_sizes=(2, 3), seq=(8, 6), swap=False, **extra):
    """Keyword calls as a tokenizer's output is passed: input_ids and attention_mask (swapped: mask first)."""
    calls = []
    for bs, length in zip(batch_sizes, seq):
        ids = torch.randint(0, VOCAB, (bs, length))
        mask = torch.ones(bs, length, dtype=torch.long)
        mask[0, -2:] = 0
        kwargs = {"attention_mask": mask, "input_ids": ids} if swap else {"input_ids": ids, "attention_mask": mask}
        calls.append(((), {**kwargs, **extra}))
    return calls


def image_calls(batch_sizes=(2, 3)):
    return [((), {"pixel_values": torch.randn(bs, 3, 16, 16)}) for bs in batch_sizes]


def recorded(model, calls):
    """The model wrapped and called as a user calls it; returns the wrapper (its samples recorded)."""
    wrapped = ait.Module(model, name=type(model).__name__)
    with torch.no_grad():
        for args, kwargs in calls:
            wrapped(*args, **kwargs)
    return wrapped


def build(backend, wrapped, workdir):
    return backend.build(wrapped.module, wrapped.samples, CPU, workdir)


def assert_like_eager(backend, model, args, kwargs):
    """The backend answers like eager: same output class, correct, and its fields readable by name."""
    with torch.no_grad():
        got, want = backend(*args, **kwargs), model(*args, **kwargs)
    assert type(got) is type(want), f"{type(got).__name__} where eager gives {type(want).__name__}"
    report = compare_outputs([(got, want)])
    assert report.passed, report.reason
    return got


def round_trip(backend, model, workdir):
    """The backend as a checkpoint restores it: its state through JSON (keys sorted, as the checkpoint's manifest
    has them), its artifacts from their files."""
    state, artifacts = backend.export()
    again = type(backend)(backend.config)
    again.restore(model, json.loads(json.dumps(state, sort_keys=True)), artifacts, CPU, workdir)
    again.deploy()
    return again


MODELS = {
    "bert": (tiny_bert, text_calls, "logits"),
    "gpt2": (tiny_gpt2, text_calls, "logits"),
    "t5-encoder": (tiny_t5_encoder, text_calls, "last_hidden_state"),
    "vit": (tiny_vit, image_calls, "pooler_output"),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_onnx_runtime_serves_keyword_calls_and_returns_the_model_output_class(name, tmp_path, caplog):
    make, calls, field = MODELS[name]
    torch.manual_seed(0)
    model = make()
    wrapped = recorded(model, calls())
    assert type(wrapped.samples.samples[0].outputs).__name__ != "dict"   # recorded as the model's class
    backend = build(ONNXRuntimeBackend(), wrapped, tmp_path / "build")
    (args, kwargs), = calls(batch_sizes=(4,), seq=(7,))[:1] if make is not tiny_vit else image_calls((4,))
    out = assert_like_eager(backend, model, args, kwargs)
    assert getattr(out, field).shape[0] == 4 and out[0] is getattr(out, next(iter(out)))
    again = round_trip(backend, model, tmp_path / "load")
    with caplog.at_level(logging.WARNING, logger="aitune_ray.backend.baked_call"):
        out = assert_like_eager(again, model, args, kwargs)
    assert getattr(out, field).shape[0] == 4
    # the restored graph answers the call it was made for (never eager behind the graph's back)
    assert not [r for r in caplog.records if "runs eagerly" in r.getMessage()]


def test_keywords_in_another_order_than_forward_bind_by_name(tmp_path):
    torch.manual_seed(0)
    model = tiny_bert()
    wrapped = recorded(model, text_calls())               # recorded in forward's order
    backend = build(ONNXRuntimeBackend(), wrapped, tmp_path)
    for args, kwargs in text_calls((2, 5), (8, 5), swap=True):   # called with the mask first
        assert list(kwargs) == ["attention_mask", "input_ids"]
        assert_like_eager(backend, model, args, kwargs)
    # recorded swapped, called in forward's order
    swapped = build(ONNXRuntimeBackend(), recorded(model, text_calls(swap=True)), tmp_path / "swapped")
    for args, kwargs in text_calls((3,), (6,)):
        assert_like_eager(swapped, model, args, kwargs)


@pytest.mark.parametrize("return_dict", [True, False])
def test_return_dict_true_and_false_and_use_cache_false_keywords(return_dict, tmp_path):
    torch.manual_seed(0)
    model = tiny_gpt2()
    extra = {"return_dict": return_dict, "use_cache": False}
    backend = build(ONNXRuntimeBackend(), recorded(model, text_calls(**extra)), tmp_path)
    (args, kwargs), = text_calls((4,), (5,), **extra)
    out = assert_like_eager(backend, model, args, kwargs)
    if return_dict:
        assert out.logits.shape == (4, 5, VOCAB)
    else:
        assert isinstance(out, tuple) and out[0].shape == (4, 5, VOCAB)


@pytest.mark.parametrize("use_dynamo", [True, False])
def test_a_non_tensor_keyword_with_another_value_runs_eagerly_never_a_wrong_answer(use_dynamo, tmp_path, caplog):
    torch.manual_seed(0)
    model = Scaled().eval()
    calls = [((torch.randn(bs, 8),), {"scale": 0.5, "flag": True}) for bs in (2, 3)]
    backend = build(ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=use_dynamo)), recorded(model, calls),
                    tmp_path)
    x = torch.randn(5, 8)
    graph_runs = []
    run = backend._bound.run
    backend._bound.run = lambda inputs: graph_runs.append(1) or run(inputs)
    assert_like_eager(backend, model, (x,), {"flag": True, "scale": 0.5})   # the baked values: the graph
    assert graph_runs == [1]
    with caplog.at_level(logging.WARNING, logger="aitune_ray.backend.baked_call"):
        for _ in range(2):
            assert_like_eager(backend, model, (x,), {"scale": 0.7, "flag": True})   # another value: eager
            assert_like_eager(backend, model, (x,), {"scale": 0.5, "flag": False})
    assert graph_runs == [1]
    warned = [r.getMessage() for r in caplog.records if "runs eagerly" in r.getMessage()]
    assert len(warned) == 1 and "scale=0.5, flag=True" in warned[0]
    again = round_trip(backend, model, tmp_path / "load")   # the baked values survive a checkpoint
    assert_like_eager(again, model, (x,), {"scale": 0.7, "flag": True})
    assert_like_eager(again, model, (x,), {"scale": 0.5, "flag": True})


def test_a_tuple_output_class_is_restored_only_from_classes_already_imported(tmp_path):
    """A checkpoint names the output class; it resolves against what is imported, never by an import."""
    from aitune_ray.model.structure import Structure

    torch.manual_seed(0)
    model = tiny_bert()
    backend = build(ONNXRuntimeBackend(), recorded(model, text_calls()), tmp_path)
    state, _ = backend.export()
    spec = state["exported"]["output_spec"]
    assert spec["class"] == "transformers.modeling_outputs:SequenceClassifierOutput"
    spec = dict(spec, **{"class": "os:system"})   # no container class: the base container instead
    assert type(Structure.from_data(spec).rebuild([torch.zeros(1)])) is dict
    spec = dict(spec, **{"class": "not_imported_anywhere.module:Output"})
    assert type(Structure.from_data(spec).rebuild([torch.zeros(1)])) is dict


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "vit"])
def test_inductor_jit_serves_keyword_calls_with_the_model_output_class(name, tmp_path):
    make, calls, field = MODELS[name]
    torch.manual_seed(0)
    model = make()
    wrapped = recorded(model, calls(batch_sizes=(2,), seq=(8,)) if make is not tiny_vit else calls((2,)))
    backend = build(TorchInductorJitBackend(), wrapped, tmp_path)
    sample = wrapped.samples.samples[0]
    out = assert_like_eager(backend, model, sample.args, sample.kwargs)
    assert getattr(out, field) is out[field]
    if make is tiny_bert:   # keywords swapped and return_dict=False
        kwargs = dict(reversed(list(sample.kwargs.items())), return_dict=False)
        assert isinstance(assert_like_eager(backend, model, (), kwargs), tuple)
    again = round_trip(backend, model, tmp_path / "load")
    assert type(again(*sample.args, **sample.kwargs)) is type(out)


@pytest.mark.slow
def test_inductor_jit_answers_a_later_float_keyword_as_eager(tmp_path):
    torch.manual_seed(0)
    model = Scaled().eval()
    wrapped = recorded(model, [((torch.randn(2, 8),), {"scale": 0.5, "flag": True})])
    backend = build(TorchInductorJitBackend(), wrapped, tmp_path)
    x = torch.randn(2, 8)
    assert_like_eager(backend, model, (x,), {"scale": 0.5, "flag": True})
    assert_like_eager(backend, model, (x,), {"flag": True, "scale": 0.7})


def test_tune_keeps_the_model_output_class_through_the_wrapped_module(tmp_path):
    """The user's path: wrap, record with keywords, tune with ONNX Runtime, call: out.logits works."""
    torch.manual_seed(0)
    model = tiny_bert()
    wrapped = recorded(model, text_calls())
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend()).enable_performance_validation(False)
    wrapped.tune(device="cpu", strategy=strategy)
    assert wrapped.state == ModuleState.TUNED, wrapped.failure
    (args, kwargs), = text_calls((3,), (8,), swap=True)
    with torch.no_grad():
        out, want = wrapped(*args, **kwargs), model(*args, **kwargs)
    assert type(out) is type(want) and compare_outputs([(out, want)]).passed
    assert out.logits.shape == (3, 2)


class NoTensorOut(nn.Module):
    """Its ONNX export fails (it returns no tensor): a failed build whose exception the report keeps."""

    def forward(self, x, scale=1.0):
        return {"count": int(x.shape[0]), "scale": scale}


def test_reports_read_after_a_failed_export(tmp_path):
    from aitune_ray.report import summary
    from aitune_ray.report.model import TuningReport

    wrapped = recorded(NoTensorOut(), [((torch.randn(2, 4),), {"scale": 0.5})])
    report = wrapped.tune(device="cpu", strategy=ait.MaxThroughputStrategy([ONNXRuntimeBackend()]))
    assert wrapped.state == ModuleState.EAGER
    failed, = report.results
    assert failed.exception is not None and failed.error_type == "ExportError"
    data = TuningReport(modules=[report]).to_dict()
    assert data["modules"][0]["results"][0]["error_type"] == "ExportError"
    assert "exception" not in data["modules"][0]["results"][0]
    text = summary(TuningReport(modules=[report]))
    assert "ONNXRuntimeBackend" in text and "returns no tensor" in text
    assert "ONNXRuntimeBackend" in report.markdown()


def test_correctness_names_a_dict_where_eager_gives_a_model_output():
    torch.manual_seed(0)
    model = tiny_bert()
    (args, kwargs), = text_calls((2,), (8,))
    with torch.no_grad():
        want = model(*args, **kwargs)
    report = compare_outputs([(dict(want), want)])
    assert not report.passed
    assert report.reason == "sample 0: output: a dict where eager gives a SequenceClassifierOutput"


@pytest.mark.slow
def test_inductor_aot_runs_another_float_keyword_eagerly_and_the_baked_one_on_its_package(tmp_path, caplog):
    from aitune_ray.backend import TorchInductorAotBackend

    torch.manual_seed(0)
    model = Scaled().eval()
    wrapped = recorded(model, [((torch.randn(bs, 8),), {"flag": True, "scale": 0.5}) for bs in (2, 3)])
    backend = build(TorchInductorAotBackend(), wrapped, tmp_path / "build")
    x = torch.randn(4, 8)
    def warned():
        return [r for r in caplog.records if r.name == "aitune_ray.backend.baked_call"]

    with caplog.at_level(logging.WARNING, logger="aitune_ray.backend.baked_call"):
        assert_like_eager(backend, model, (x,), {"scale": 0.5, "flag": True})
        assert not warned()
        assert_like_eager(backend, model, (x,), {"scale": 0.7, "flag": True})
        assert_like_eager(backend, model, (x,), {"scale": 0.7, "flag": True})
        assert ["runs eagerly" in r.getMessage() for r in warned()] == [True]
    again = round_trip(backend, model, tmp_path / "load")
    assert_like_eager(again, model, (x,), {"flag": True, "scale": 0.7})
    assert_like_eager(again, model, (x,), {"flag": True, "scale": 0.5})


@pytest.mark.slow
def test_inductor_aot_exports_a_model_taking_return_dict_through_its_kwargs(tmp_path, caplog):
    """BertForSequenceClassification takes return_dict through **kwargs: the export sees only the call's tensors
    (the bool is a constant checked on every call), with a dynamic batch; a call with return_dict=False runs
    eagerly and returns the tuple, and the checkpoint serves the same way."""
    from aitune_ray.backend import TorchInductorAotBackend

    torch.manual_seed(0)
    model = tiny_bert()
    backend = build(TorchInductorAotBackend(), recorded(model, text_calls(seq=(8, 8), return_dict=True)),
                    tmp_path / "build")
    (args, kwargs), = text_calls((4,), (8,), return_dict=True)

    def warned():
        return [r.getMessage() for r in caplog.records if r.name == "aitune_ray.backend.baked_call"]

    with caplog.at_level(logging.WARNING, logger="aitune_ray.backend.baked_call"):
        assert assert_like_eager(backend, model, args, kwargs).logits.shape == (4, 2)
        assert not warned()
        out = assert_like_eager(backend, model, args, {**kwargs, "return_dict": False})
    assert isinstance(out, tuple) and ["runs eagerly" in m for m in warned()] == [True]
    again = round_trip(backend, model, tmp_path / "load")
    swapped = {"return_dict": True, "attention_mask": kwargs["attention_mask"], "input_ids": kwargs["input_ids"]}
    assert assert_like_eager(again, model, args, swapped).logits.shape == (4, 2)


Pair = collections.namedtuple("Pair", "first second")


def test_structures_keep_namedtuples_ordered_dicts_and_nesting_through_plain_data():
    from aitune_ray.model.samples import detach_clone
    from aitune_ray.model.structure import Structure

    value = collections.OrderedDict(a=Pair(torch.ones(2), [torch.zeros(1), None, 3]), b=(0.5, "s", True))
    copied = detach_clone(value)
    assert type(copied) is collections.OrderedDict and type(copied["a"]) is Pair and type(copied["a"][1]) is list
    leaves, structure = Structure.of(value)
    assert len(leaves) == 2 and structure.leaf_count == 2
    again = Structure.from_data(json.loads(json.dumps(structure.to_data()))).rebuild(leaves)
    assert type(again) is collections.OrderedDict and type(again["a"]) is Pair
    assert again["a"].second[1:] == [None, 3] and again["b"] == (0.5, "s", True)
    with pytest.raises(ValueError, match="structure value"):
        Structure.from_data({"kind": "value", "value": {"nested": "object"}})
