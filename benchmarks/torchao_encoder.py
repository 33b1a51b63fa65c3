"""TorchAO on the ViT-B-sized encoder, compiled and not: does each build, and how close is it to eager?

    python benchmarks/torchao_encoder.py --quantization fp8wo

On the GPU image (torch 2.11, torchao 0.18) the compiled fp8wo build of this encoder fails: Dynamo cannot
trace TorchAO's tensor subclass there. The build's error then names compile=False as the way out; this
checks both builds and prints, per build, its outcome, its relative L2 error against eager on the first
recorded batch (aitune_ray.measure.correctness, the tuner's own check) and how many Linear layers it quantized.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backends import make_model  # noqa: E402

from aitune_ray.backend import TorchAOBackend, TorchAOBackendConfig  # noqa: E402
from aitune_ray.measure.correctness import compare_outputs  # noqa: E402
from aitune_ray.samples import Sample, SampleStore  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quantization", default="fp8wo")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    model, data = make_model("encoder", device, dtype)
    model, x = model.eval(), data[0]
    with torch.no_grad():
        ref = model(x)
    store = SampleStore([Sample((x,), {}, ref, x.shape[0])])
    print(f"TorchAO {args.quantization} on the encoder ({dtype}, batch {x.shape[0]}, {device})")
    for compiled in (True, False):
        config = TorchAOBackendConfig(quantization=args.quantization, compile=compiled)
        try:
            backend = TorchAOBackend(config).build(model, store, device, Path(tempfile.mkdtemp()))
            check = compare_outputs([(backend.infer(x), ref)], tolerance=TorchAOBackend.default_tolerance)
            print(f"compile={compiled}: built, relative L2 error {check.max_error:.3e} "
                  f"({'within' if check.passed else 'over'} its tolerance {check.tolerance:g}), "
                  f"{backend.quantized_layers} of {backend.quantizable_layers} Linear layers quantized")
        except Exception as exc:  # the outcome is what this prints
            print(f"compile={compiled}: {type(exc).__name__}: {str(exc)[:400]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
