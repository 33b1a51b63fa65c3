"""The transformers encoder through the Python API (random weights from a config; nothing downloads).

    pip install 'aitune-ray[transformers]'
    python examples/hf_encoder/run.py                              # BERT-base shape, bf16 on a GPU, local Ray
    python examples/hf_encoder/run.py --size tiny --executor inline    # test size, in this process
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import (  # noqa: E402
    KernelSelectorBackend, ONNXRuntimeBackend, TorchEagerBackend, TorchInductorJitBackend)
from examples.helpers import arguments, device_and_dtype, measure, tune_save_and_compare  # noqa: E402
from examples.hf_encoder.model import make_data, make_model  # noqa: E402


def main(argv=None) -> None:
    args = arguments(__doc__, "out/hf_encoder_run.ait", argv)
    gpu, device, dtype = device_and_dtype(args, "bfloat16")
    backends = ([TorchInductorJitBackend(), ONNXRuntimeBackend(), KernelSelectorBackend()] if gpu
                else [TorchEagerBackend(), ONNXRuntimeBackend()])

    model = ait.Module(make_model(size=args.size, dtype=dtype).to(device), "hf_encoder",
                       strategy=ait.MaxThroughputStrategy(backends, measure_config=measure(args)))
    data = [{k: v.to(device) for k, v in item.items()} for item in make_data()]
    fresh = ait.Module(make_model(size=args.size, dtype=dtype).to(device), "hf_encoder")   # what loads the checkpoint
    tune_save_and_compare(model, data, device, args, fresh)


if __name__ == "__main__":
    main()
