"""Which backend wins on my model: every backend on one model, MaxThroughput, side by side in one run; prints
the report table. With --wrapper-cost: what the deployed module's own layers cost per call.

    python benchmarks/backends.py --model encoder --device cuda --out report.md
    python benchmarks/backends.py --model mlp --device cpu --backends jit,onnx
    python benchmarks/backends.py --model bert --backends jit,aot,onnx,ao-int8dq,kernels
    python benchmarks/backends.py --wrapper-cost [--calls 200000] --out OUT/wrapper.md

--wrapper-cost times, over a backend that does nothing, the wrapped Module, a backend's infer() and a
batch-size dispatch in front of it: the best of 5 timeit repeats, microseconds per call, gradients off as in a
serving loop (and the wrapped Module once with them on). A host-bound call of about 1 ms on a GPU (a CUDA-graph
replay of a ViT-B at batch 8) pays these microseconds in full: they are the floor under any speedup there.

Models: mlp, encoder (ViT-B-sized), bert (examples/bert: base on a GPU, tiny on a CPU) and pipeline
(examples/pipeline: two modules, each tuned with the same backends).

Backends: jit, jit-max (max-autotune-no-cudagraphs), jit-max-static (the same with dynamic=False: each batch
size compiled and autotuned on its own), jit-max-graphs (max-autotune, with CUDA graphs), jit-ro
(reduce-overhead: CUDA graphs), aot, onnx,
onnx-graphs (ONNX Runtime with CUDA graphs), onnx-opt (with its transformer optimizer), onnx-opt-graphs (both), ao-int8wo,
ao-int8dq, ao-fp8wo, kernels (KernelSelectorBackend: attention kernel selection, then Inductor JIT).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import timeit
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # results_table.py

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import (  # noqa: E402
    KernelSelectorBackend,
    ONNXRuntimeBackend,
    ONNXRuntimeBackendConfig,
    TorchAOBackend,
    TorchAOBackendConfig,
    TorchInductorAotBackend,
    TorchInductorJitBackend,
    TorchInductorJitBackendConfig,
)
from aitune_ray.backend.backend import Backend  # noqa: E402
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from aitune_ray.model.samples import SampleStore, map_structure  # noqa: E402
from results_table import publish  # noqa: E402

MODELS = ["mlp", "encoder", "bert", "pipeline"]
BACKENDS = {
    "jit": lambda: TorchInductorJitBackend(),
    "jit-max": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="max-autotune-no-cudagraphs")),
    "jit-ro": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="reduce-overhead")),
    # a graph per recorded batch size: automatic dynamic shapes serve every size from one dynamic graph
    # once a second size is seen, which may be slower at a small, host-bound size
    "jit-static": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(dynamic=False)),
    # max-autotune per recorded batch size (no dynamic recompile, which skips autotuning), and with CUDA graphs
    "jit-max-static": lambda: TorchInductorJitBackend(
        TorchInductorJitBackendConfig(mode="max-autotune-no-cudagraphs", dynamic=False)),
    "jit-max-graphs": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="max-autotune")),
    "aot": lambda: TorchInductorAotBackend(),
    "onnx": lambda: ONNXRuntimeBackend(),
    "onnx-graphs": lambda: ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_cuda_graphs=True)),
    "onnx-opt": lambda: ONNXRuntimeBackend(ONNXRuntimeBackendConfig(transformer_optimizer="bert")),
    "onnx-opt-graphs": lambda: ONNXRuntimeBackend(ONNXRuntimeBackendConfig(transformer_optimizer="bert",
                                                                           use_cuda_graphs=True)),
    "ao-int8wo": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="int8wo")),
    "ao-int8dq": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="int8dq")),
    "ao-fp8wo": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="fp8wo")),
    "ao-fp8dq": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="fp8dq")),
    "kernels": lambda: KernelSelectorBackend(),
    "kernels-ro": lambda: KernelSelectorBackend(
        delegate_backend=TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="reduce-overhead"))),
}


def make_model(name: str, device: torch.device, dtype: torch.dtype):
    """(model, dataset) for a named benchmark model: big on a GPU, small on a CPU.

    The model is an nn.Module, or for "pipeline" a plain object holding two (see wrap_model). Dataset
    items are tensors or keyword dicts; floating-point tensors get dtype, integer ones (token ids) keep theirs.
    """
    gpu = device.type == "cuda"
    if name == "mlp":
        width = 4096 if gpu else 256
        layers = []
        for _ in range(8):
            layers += [nn.Linear(width, width), nn.GELU()]
        model = nn.Sequential(*layers)
        batches = (64, 1024) if gpu else (4, 64)
        data = [torch.randn(bs, width) for bs in batches]
    elif name == "encoder":  # a ViT-B-sized encoder on patch tokens
        width, depth, tokens = (768, 12, 197) if gpu else (128, 2, 32)
        layer = nn.TransformerEncoderLayer(width, width // 64, 4 * width, batch_first=True, norm_first=True,
                                           dropout=0.0)
        model = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        batches = (8, 8, 128) if gpu else (2, 2, 16)
        data = [torch.randn(bs, tokens, width) for bs in batches]
    elif name == "bert":  # examples/bert: BERT-base at sequence length 128 on a GPU, the tiny one on a CPU
        from examples.bert.model import make_data as bert_data, make_model as bert_model

        size = "base" if gpu else "tiny"
        model = bert_model(size)
        data = bert_data(size, batch_sizes=(8, 32) if gpu else (2, 8), per_batch_size=2)
    elif name == "pipeline":  # examples/pipeline: a convolutional encoder, then a head, two modules
        from examples.pipeline.model import make_data as pipeline_data, make_model as pipeline_model

        model = pipeline_model(channels=64, features=1024) if gpu else pipeline_model()
        data = (pipeline_data(batch_sizes=(8, 64), per_batch_size=2, channels=64, length=1024) if gpu
                else pipeline_data(batch_sizes=(2, 8), per_batch_size=2))
    else:
        raise SystemExit(f"unknown model {name!r}")
    for module in [model] if isinstance(model, nn.Module) else [model.encoder, model.head]:
        module.eval().to(device, dtype)
    return model, [map_structure(x, lambda t: t.to(device, dtype) if t.is_floating_point() else t.to(device))
                   for x in data]


def recorded_encoder(device: torch.device):
    """(model, samples): the encoder (make_model's) with its calls recorded, as a tuner's driver has them."""
    from aitune_ray.model.recording import recording_session

    model, data = make_model("encoder", device, torch.float16 if device.type == "cuda" else torch.float32)
    wrapped = ait.Module(model, "encoder")
    with recording_session(), torch.no_grad():
        for item in data:
            wrapped(item)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return model, wrapped.samples


def wrap_model(name: str, model, strategy_factory):
    """(what to call, the wrapped Modules): the whole model as one Module, or each pipeline module."""
    if name == "pipeline":
        model.encoder = ait.Module(model.encoder, "encoder", strategy=strategy_factory())
        model.head = ait.Module(model.head, "head", strategy=strategy_factory())
        return model, [model.encoder, model.head]
    wrapped = ait.Module(model, name, strategy=strategy_factory())
    return wrapped, [wrapped]


class Passthrough(nn.Module):
    def forward(self, x):
        return x


class NothingBackend(Backend):
    """A backend whose call returns its input: what is left is the layers around it."""

    def _build(self, module, samples, device, workdir) -> None:
        pass

    def _infer(self, *args, **kwargs):
        return args[0]


def wrapper_cost(calls: int) -> dict[str, float]:
    """Microseconds per call of each layer of a deployed module, over a backend that does nothing."""
    def best_us(fn) -> float:
        return min(timeit.repeat(fn, number=calls, repeat=5)) / calls * 1e6

    cpu = torch.device("cpu")
    small, large = NothingBackend(), NothingBackend()
    for backend in (small, large):
        backend.build(Passthrough(), SampleStore(), cpu, Path(tempfile.mkdtemp()))
    dispatch = BatchDispatchBackend.assemble(Passthrough(), {"s": small, "l": large}, {8: "s", 32: "l"}, cpu)
    single, routed = ait.Module(Passthrough()), ait.Module(Passthrough())
    single.use_backend(small)
    routed.use_backend(dispatch)
    x = torch.ones(8, 3)
    layers = {"backend.infer()": lambda: small.infer(x), "dispatch.infer() over two backends": lambda: dispatch.infer(x),
              "Module(...) with one backend": lambda: single(x), "Module(...) with the dispatch": lambda: routed(x)}
    with torch.no_grad():
        out = {name: best_us(fn) for name, fn in layers.items()}
    out["Module(...) with one backend, gradients on"] = best_us(layers["Module(...) with one backend"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp", choices=MODELS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: bf16 on GPU)")
    parser.add_argument("--backends", default="jit,onnx,ao-int8wo", help=f"comma list of {sorted(BACKENDS)}")
    parser.add_argument("--executor", default="inline", choices=["inline", "ray"])
    parser.add_argument("--out", default=None, help="write the markdown report (and a .json beside it)")
    parser.add_argument("--wrapper-cost", action="store_true", help="time the deployed module's own layers instead")
    parser.add_argument("--calls", type=int, default=200_000, help="calls per timeit repeat (--wrapper-cost)")
    args = parser.parse_args()
    if args.wrapper_cost:
        us = wrapper_cost(args.calls)
        text = "\n".join(["| layer | us per call |", "|---|---|"] + [f"| {k} | {v:.2f} |" for k, v in us.items()])
        publish(text, args.out, {"us_per_call": us}, benchmark="wrapper")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    model, data = make_model(args.model, device, dtype)
    names = [name for name in args.backends.split(",") if name]
    root, _ = wrap_model(args.model, model, lambda: ait.MaxThroughputStrategy(
        [BACKENDS[name]() for name in names], measure_config=MeasureConfig(max_seconds=1.0)))
    executor = ait.InlineExecutor() if args.executor == "inline" else ait.RayExecutor()
    started = time.perf_counter()
    report = ait.tune(root, data, device=device, executor=executor, call_as_given=True)
    wall = time.perf_counter() - started
    text = report.markdown() + f"\nTuning wall time: {wall:.1f} s ({args.executor}, {device}, {dtype})\n"
    publish(text, args.out, report.to_dict(), benchmark="backends")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
