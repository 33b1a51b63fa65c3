"""The BERT example through the Python API (what examples/bert/job.yaml does, as a script).

    python examples/bert/run.py                              # BERT-base, bf16 on a GPU, on local Ray
    python examples/bert/run.py --size tiny --executor inline    # test size, on this process's CPU
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import (  # noqa: E402
    KernelSelectorBackend, ONNXRuntimeBackend, TorchAOBackend, TorchAOBackendConfig, TorchEagerBackend,
    TorchInductorJitBackend)
from examples.helpers import arguments, device_and_dtype, measure, tune_save_and_compare  # noqa: E402
from examples.bert.model import make_data, make_model  # noqa: E402


def main(argv=None) -> None:
    args = arguments(__doc__, "out/bert_run.ait", argv)
    gpu, device, dtype = device_and_dtype(args, "bfloat16")
    backends = [TorchInductorJitBackend(), TorchAOBackend(TorchAOBackendConfig(quantization="int8wo")),
                ONNXRuntimeBackend(), KernelSelectorBackend()] if gpu else [TorchEagerBackend(), ONNXRuntimeBackend()]

    model = ait.Module(make_model(size=args.size, dtype=dtype).to(device), "bert",
                       strategy=ait.MaxThroughputStrategy(backends, measure_config=measure(args)))
    data = [{k: v.to(device) for k, v in item.items()} for item in make_data(size=args.size, batch_sizes=(2, 8))]
    fresh = ait.Module(make_model(size=args.size, dtype=dtype).to(device), "bert")   # what loads the checkpoint
    tune_save_and_compare(model, data, device, args, fresh)


if __name__ == "__main__":
    main()
