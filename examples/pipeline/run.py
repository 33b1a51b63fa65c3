"""The pipeline example through the Python API: two modules of a plain object, each wrapped and tuned.

    python examples/pipeline/run.py                       # on local Ray
    python examples/pipeline/run.py --executor inline     # in this process
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import ONNXRuntimeBackend, TorchEagerBackend, TorchInductorJitBackend  # noqa: E402
from examples.helpers import tune_save_and_compare  # noqa: E402
from examples.pipeline.model import make_data, make_model  # noqa: E402


def wrap(pipeline, backends):
    """Each module of the pipeline in an ait.Module, with a strategy of its own."""
    pipeline.encoder = ait.Module(pipeline.encoder, "encoder", strategy=ait.FirstWinsStrategy(backends()))
    pipeline.head = ait.Module(pipeline.head, "head", strategy=ait.FirstWinsStrategy(backends()))
    return pipeline


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=["ray", "inline"], default="ray")
    parser.add_argument("--eager-only", action="store_true", help="only the eager backend (a quick check)")
    parser.add_argument("--out", default="out/pipeline_run.ait")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def backends():
        return [TorchEagerBackend()] if args.eager_only else [TorchInductorJitBackend(), ONNXRuntimeBackend()]

    pipeline = wrap(make_model(), backends)
    pipeline.encoder.to(device), pipeline.head.to(device)
    data = [{"signal": item["signal"].to(device)} for item in make_data()]
    fresh = make_model()                                 # ait.load wraps its plain modules
    fresh.encoder.to(device), fresh.head.to(device)
    tune_save_and_compare(pipeline, data, device, args, fresh)   # tunes both modules; one file holds both


if __name__ == "__main__":
    main()
