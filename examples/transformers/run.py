"""GPT-2 from transformers, tuned with keywords through the Python API (random weights; nothing downloads).

    pip install 'aitune-ray[transformers,onnx]'
    python examples/transformers/run.py --size tiny --executor inline    # CPU size, in this process
    python examples/transformers/run.py                                  # GPT-2 small's shape, bf16 on a GPU, Ray
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend import TorchInductorJitBackend  # noqa: E402
from aitune_ray.report import summary  # noqa: E402
from examples.helpers import arguments, device_and_dtype, measure  # noqa: E402
from examples.transformers.model import make_data, make_model  # noqa: E402


def main(argv=None) -> None:
    args = arguments(__doc__, "out/transformers_run.ait", argv)
    gpu, device, dtype = device_and_dtype(args, "bfloat16")
    size = "base" if args.size == "base" else "tiny"
    model = ait.Module(make_model(size, dtype).to(device), "gpt2", strategy=ait.MaxThroughputStrategy(
        [TorchInductorJitBackend()], measure_config=measure(args)))
    calls = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in item.items()}
             for item in make_data(size)]
    rounds = 5 if args.size == "tiny" else 30
    executor = ait.InlineExecutor(rounds) if args.executor == "inline" else ait.RayExecutor(remeasure_rounds=rounds)
    report = ait.tune(model, calls, device=device, executor=executor, call_as_given=True)   # each item one call
    print(summary(report))   # the answer first; report.markdown() gives every figure

    with torch.no_grad():
        tuned = model(**calls[-1])    # a CausalLMOutputWithCrossAttentions, as from the model itself
    print(f"output: {type(tuned).__name__} with {list(tuned.keys())}")
    ait.save(model, args.out)
    fresh = ait.load(ait.Module(make_model(size, dtype).to(device), "gpt2"), args.out)
    with torch.no_grad():
        again = fresh(**calls[-1])
    print(f"checkpoint {args.out}: max abs difference after load "
          f"{(again.logits.float() - tuned.logits.float()).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
