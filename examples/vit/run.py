"""The ViT example through the Python API (what examples/vit/job.yaml does, as a script).

    python examples/vit/run.py                              # ViT-B/16, fp16 on a GPU, on local Ray
    python examples/vit/run.py --size tiny --executor inline    # test size, on this process's CPU
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import (  # noqa: E402
    KernelSelectorBackend, TorchAOBackend, TorchAOBackendConfig, TorchEagerBackend, TorchInductorJitBackend,
    TorchInductorJitBackendConfig)
from examples.helpers import arguments, device_and_dtype, measure, tune_save_and_compare  # noqa: E402
from examples.vit.model import make_data, make_model  # noqa: E402


def main(argv=None) -> None:
    args = arguments(__doc__, "out/vit_run.ait", argv)
    gpu, device, dtype = device_and_dtype(args, "float16")
    if gpu:
        backends = [TorchInductorJitBackend(), TorchInductorJitBackend(TorchInductorJitBackendConfig(mode="reduce-overhead")),
                    TorchAOBackend(TorchAOBackendConfig(quantization="fp8wo")), KernelSelectorBackend()]
    else:
        backends = [TorchEagerBackend(), TorchAOBackend(TorchAOBackendConfig(quantization="int8wo", compile=False))]

    model = ait.Module(make_model(size=args.size, dtype=dtype).to(device), "vit",
                       strategy=ait.MaxThroughputStrategy(backends, measure_config=measure(args)))
    data = [x.to(device) for x in make_data(size=args.size, batch_sizes=(2, 8), dtype=dtype)]
    fresh = ait.Module(make_model(size=args.size, dtype=dtype).to(device), "vit")   # what loads the checkpoint
    tune_save_and_compare(model, data, device, args, fresh)


if __name__ == "__main__":
    main()
