"""export_onnx: dynamic batch axes from the recorded batch sizes, one external data file, failures by step."""

import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from aitune_ray.backend.onnx_export import ExportedModel, _one_data_file, export_onnx
from aitune_ray.errors import BuildError, ExportError
from aitune_ray.model.samples import Sample, SampleStore


class TwoInOneOut(nn.Module):
    """(x: batch x 8, scale: 8) -> {"y": batch x 4, "rows": x's row sums}."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x, scale):
        return {"y": self.linear(x * scale), "rows": x.sum(dim=1)}


def store(module, batch_sizes, scale_rows=8) -> SampleStore:
    samples = []
    for bs in batch_sizes:
        x, scale = torch.randn(bs, 8), torch.randn(scale_rows)
        with torch.no_grad():
            samples.append(Sample((x,), {"scale": scale}, module(x, scale=scale), bs))
    return SampleStore(samples)


def dims(path, where="input"):
    graph = onnx.load(str(path)).graph
    values = graph.input if where == "input" else graph.output
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


@pytest.mark.parametrize("use_dynamo", [True, False])
def test_batch_axis_is_dynamic_where_it_follows_the_recorded_batch_sizes(tmp_path, use_dynamo):
    module = TwoInOneOut().eval()
    samples = store(module, (2, 5))
    exported = export_onnx(module, samples, tmp_path / "model.onnx", use_dynamo=use_dynamo)
    # x follows the batch size; scale (8 rows at batch 2 and at 5) does not
    assert exported.dynamic_axes == {"input_0": {0: "batch"}, "output_0": {0: "batch"}, "output_1": {0: "batch"}}
    assert exported.graph_inputs == ["input_0", "input_1"] and exported.batch_sizes == [2, 5]
    inputs = dims(exported.path)
    assert isinstance(inputs["input_0"][0], str) and inputs["input_0"][1] == 8
    assert inputs["input_1"] == [8]
    # the model runs at a batch size that was never recorded, and the outputs keep the module's structure
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    x, scale = torch.randn(3, 8), torch.randn(8)
    leaves = session.run(exported.output_names, {"input_0": x.numpy(), "input_1": scale.numpy()})
    out = exported.unflatten([torch.from_numpy(v) for v in leaves])
    with torch.no_grad():
        ref = module(x, scale)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert ExportedModel.from_dict(exported.to_dict(), exported.path, module) == exported


def test_one_recorded_batch_size_exports_static_shapes(tmp_path):
    module = TwoInOneOut().eval()
    exported = export_onnx(module, store(module, (4, 4)), tmp_path / "model.onnx")
    assert exported.dynamic_axes == {}
    assert dims(exported.path)["input_0"] == [4, 8]
    assert exported.files() == {"model.onnx": exported.path}


def test_weights_in_many_external_files_become_one_data_file(tmp_path):
    module = TwoInOneOut().eval()
    exported = export_onnx(module, store(module, (2, 3)), tmp_path / "model.onnx", use_dynamo=False)
    model = onnx.load(str(exported.path))
    onnx.save_model(model, str(exported.path), save_as_external_data=True, all_tensors_to_one_file=False,
                    size_threshold=0)                           # one file per tensor, as a large export may write
    assert len(list(tmp_path.iterdir())) > 2
    _one_data_file(onnx, exported.path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert set(exported.files()) == {"model.onnx", "model.onnx.data"}
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    x, scale = torch.randn(2, 8), torch.randn(8)
    got = session.run(["output_0"], {"input_0": x.numpy(), "input_1": scale.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), module(x, scale)["y"].detach(), rtol=1e-5, atol=1e-5)


class Fails(nn.Module):
    def forward(self, x):
        raise RuntimeError("this model cannot be traced")


def test_a_failing_export_names_its_step(tmp_path):
    samples = SampleStore([Sample((torch.randn(2, 8),), {}, torch.randn(2, 8), 2)])
    with pytest.raises(ExportError, match=r"ONNX export of Fails failed at step 'export'.*cannot be traced") as info:
        export_onnx(Fails(), samples, tmp_path / "model.onnx", use_dynamo=False)
    assert info.value.step == "export" and isinstance(info.value, BuildError)
    with pytest.raises(ExportError, match=r"step 'prepare'.*no recorded samples"):
        export_onnx(Fails(), SampleStore(), tmp_path / "model.onnx")


class Keywords(nn.Module):
    """Called with tensor and non-tensor keywords: forward(x, mask=None, scale=1.0, flag=False)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x, mask=None, scale=1.0, flag=False):
        y = self.linear(x * mask.unsqueeze(-1)) * scale
        return (y + 1.0 if flag else y), None


@pytest.mark.parametrize("use_dynamo", [True, False])
def test_float_and_bool_keywords_export_as_constants_and_the_sequence_axis_varies(tmp_path, use_dynamo):
    module = Keywords().eval()
    samples = []
    for bs, seq in ((2, 6), (3, 4)):
        x, mask = torch.randn(bs, seq, 8), torch.ones(bs, seq)
        with torch.no_grad():   # the mask first: keywords in another order than forward's
            samples.append(Sample((), {"mask": mask, "flag": True, "x": x, "scale": 0.5},
                                  module(x, mask=mask, scale=0.5, flag=True), bs))
    exported = export_onnx(module, SampleStore(samples), tmp_path / "model.onnx", use_dynamo=use_dynamo)
    # the tensors bind by name in forward's order; the floats and bools are constants of the graph
    assert exported.input_names == ["input_0", "input_1"]
    assert exported.call.constants() == {"scale": 0.5, "flag": True}
    assert exported.dynamic_axes["input_0"] == {0: "batch", 1: "dim_0"}
    x, mask = torch.randn(4, 5, 8), torch.ones(4, 5)
    inputs = exported.call_inputs((x,), {"flag": True, "scale": 0.5, "mask": mask})
    assert [inputs["input_0"] is x, inputs["input_1"] is mask] == [True, True]
    assert exported.call_inputs((x,), {"mask": mask, "scale": 0.7, "flag": True}) is None
    assert exported.call_inputs((x, mask, 0.5, True), {}) is not None   # positional means the same call
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    feed = {n: inputs[n].numpy() for n in exported.graph_inputs}
    out = exported.unflatten([torch.from_numpy(v) for v in session.run(exported.output_names, feed)])
    with torch.no_grad():
        want = module(x, mask=mask, scale=0.5, flag=True)
    assert type(out) is tuple and out[1] is None
    torch.testing.assert_close(out[0], want[0], rtol=1e-5, atol=1e-5)


class SqueezeNoOp(nn.Module):
    """squeeze(1) of an axis of size 4 (PyTorch returns the input: diffusers' PixArt does this) and of a real
    axis of size 1."""

    def forward(self, x, one):
        return x.squeeze(1) * 2.0, one.squeeze(1)


def test_a_squeeze_of_an_axis_not_of_size_one_loads_in_onnx_runtime_and_answers_like_pytorch(tmp_path):
    module = SqueezeNoOp()
    samples = []
    for bs in (2, 3):
        x, one = torch.randn(bs, 4, 5), torch.randn(bs, 1, 5)
        samples.append(Sample((x, one), {}, module(x, one), bs))
    exported = export_onnx(module, SampleStore(samples), tmp_path / "model.onnx")
    ops = [n.op_type for n in onnx.load(str(exported.path)).graph.node]
    assert ops.count("Squeeze") == 1, ops            # the real one stays; the no-op one is an Identity
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    x, one = torch.randn(4, 4, 5), torch.randn(4, 1, 5)
    got = session.run(None, {"input_0": x.numpy(), "input_1": one.numpy()})
    for g, want in zip(got, module(x, one)):
        torch.testing.assert_close(torch.from_numpy(g), want)
