"""Every backend on one model, MaxThroughput, side by side in one run; prints the report table.

    python benchmarks/backends.py --model encoder --device cuda --out report.md
    python benchmarks/backends.py --model mlp --device cpu --backends jit,onnx

Backends: jit, jit-max (max-autotune-no-cudagraphs), jit-ro (reduce-overhead: CUDA graphs), aot, onnx, ao-int8wo, ao-int8dq, ao-fp8wo.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import (  # noqa: E402
    ONNXRuntimeBackend,
    TorchAOBackend,
    TorchAOBackendConfig,
    TorchInductorAotBackend,
    TorchInductorJitBackend,
    TorchInductorJitBackendConfig,
)
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402

BACKENDS = {
    "jit": lambda: TorchInductorJitBackend(),
    "jit-max": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="max-autotune-no-cudagraphs")),
    "jit-ro": lambda: TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="reduce-overhead")),
    "aot": lambda: TorchInductorAotBackend(),
    "onnx": lambda: ONNXRuntimeBackend(),
    "ao-int8wo": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="int8wo")),
    "ao-int8dq": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="int8dq")),
    "ao-fp8wo": lambda: TorchAOBackend(TorchAOBackendConfig(quantization="fp8wo")),
}


def make_model(name: str, device: torch.device, dtype: torch.dtype):
    """(model, dataset) for a named benchmark model."""
    if name == "mlp":
        width = 4096 if device.type == "cuda" else 256
        layers = []
        for _ in range(8):
            layers += [nn.Linear(width, width), nn.GELU()]
        model = nn.Sequential(*layers)
        batches = (64, 1024) if device.type == "cuda" else (4, 64)
        data = [torch.randn(bs, width) for bs in batches]
    elif name == "encoder":  # a ViT-B-sized encoder on patch tokens
        width, depth, tokens = (768, 12, 197) if device.type == "cuda" else (128, 2, 32)
        layer = nn.TransformerEncoderLayer(width, width // 64, 4 * width, batch_first=True, norm_first=True,
                                           dropout=0.0)
        model = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        batches = (8, 8, 128) if device.type == "cuda" else (2, 2, 16)
        data = [torch.randn(bs, tokens, width) for bs in batches]
    else:
        raise SystemExit(f"unknown model {name!r}")
    model = model.eval().to(device, dtype)
    return model, [x.to(device, dtype) for x in data]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp", choices=["mlp", "encoder"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: bf16 on GPU)")
    parser.add_argument("--backends", default="jit,onnx,ao-int8wo", help=f"comma list of {sorted(BACKENDS)}")
    parser.add_argument("--executor", default="inline", choices=["inline", "ray"])
    parser.add_argument("--out", default=None, help="write the markdown report (and a .json beside it)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    model, data = make_model(args.model, device, dtype)
    backends = [BACKENDS[name]() for name in args.backends.split(",") if name]
    strategy = ait.MaxThroughputStrategy(backends, measure_config=MeasureConfig(max_seconds=1.0))
    wrapped = ait.Module(model, args.model, strategy=strategy)
    executor = ait.InlineExecutor() if args.executor == "inline" else ait.RayExecutor()
    started = time.perf_counter()
    report = ait.tune(wrapped, data, device=device, executor=executor)
    wall = time.perf_counter() - started
    text = report.markdown() + f"\nTuning wall time: {wall:.1f} s ({args.executor}, {device}, {dtype})\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(report.to_dict(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
