"""Warnings a user cannot act on are silenced at the call that causes them, and nothing else is: the ONNX
export of a module says no word about dynamic_axes, torchvision or _pytree, while a warning of another kind
from the same call still reaches the user; torchao's import keeps its own other warnings."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from aitune_ray.runtime.quiet import quiet


def test_only_the_listed_noise_is_silenced_and_only_inside_the_block(caplog):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet("onnx export"):
            warnings.warn("# 'dynamic_axes' is not recommended when dynamo=True, and may lead to ...", UserWarning)
            warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", FutureWarning)
            warnings.warn("something the user should see", UserWarning)
            logging.getLogger("torch.onnx._internal.exporter._registration").warning(
                "torchvision is not installed. Skipping torchvision::nms")
            logging.getLogger("torch.onnx._internal.exporter._registration").warning("another problem")
        warnings.warn("# 'dynamic_axes' is not recommended when dynamo=True", UserWarning)   # outside: shown
        logging.getLogger("torch.onnx._internal.exporter._registration").warning("torchvision is not installed")
    assert [str(w.message) for w in caught] == ["something the user should see",
                                                "# 'dynamic_axes' is not recommended when dynamo=True"]
    assert [r.getMessage() for r in caplog.records] == ["another problem", "torchvision is not installed"]


def test_an_onnx_export_says_nothing_the_user_cannot_act_on(tmp_path, capfd):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    from aitune_ray.backend.onnx_export import export_onnx
    from aitune_ray.model.samples import Sample, SampleStore

    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    inputs = [torch.randn(bs, 8) for bs in (2, 4)]
    with torch.no_grad():
        samples = SampleStore([Sample((x,), {}, module(x), x.shape[0]) for x in inputs])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_onnx(module, samples, tmp_path / "m.onnx", use_dynamo=True)
    said = [str(w.message) for w in caught] + [capfd.readouterr().err]
    assert not any(n in s for s in said for n in ("dynamic_axes", "torchvision is not installed", "LeafSpec")), said
