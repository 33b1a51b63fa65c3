"""Helpers the example scripts share (not an example itself): their arguments, and the check after tuning (save,
model, compare outputs on one item)."""

import argparse

import torch

import aitune_ray as ait
from aitune_ray.report import summary


def device_and_dtype(args: argparse.Namespace, gpu_dtype: str) -> tuple[bool, str, str]:
    """(whether there is a GPU, the device, the parameters' dtype: gpu_dtype at full size on a GPU, else fp32)."""
    gpu = torch.cuda.is_available()
    return gpu, "cuda" if gpu else "cpu", gpu_dtype if gpu and args.size == "base" else "float32"


def measure(args: argparse.Namespace):
    """How each candidate is timed: the default, or a short measurement for the tiny (test) sizes."""
    from aitune_ray.measure.timing import MeasureConfig

    if getattr(args, "size", "base") == "tiny":
        return MeasureConfig(warmup_runs=1, min_runs=3, max_runs=20, max_seconds=0.1)
    return MeasureConfig()


def tune_save_and_compare(model, data: list, device: str, args: argparse.Namespace, fresh) -> float:
    """ait.tune on args.executor (Ray or inline), print the answer and a summary, then save_and_compare into
    fresh."""
    rounds = 5 if getattr(args, "size", "base") == "tiny" else 30      # side-by-side re-measure rounds
    executor = ait.InlineExecutor(rounds) if args.executor == "inline" else ait.RayExecutor(remeasure_rounds=rounds)
    report = ait.tune(model, data, device=device, executor=executor, call_as_given=True)
    print(summary(report))   # the answer first; report.markdown() gives every figure
    return save_and_compare(model, fresh, args.out, data[0])


def call(func, item):
    """func on a dataset item as ait.tune passes it: a dict as keywords, a tuple as arguments, else alone."""
    if isinstance(item, dict):
        return func(**item)
    return func(*item) if isinstance(item, tuple) else func(item)


def save_and_compare(tuned, fresh, path, item) -> float:
    """ait.save(tuned, path), ait.load(fresh, path), then the max abs difference of their outputs on item."""
    ait.save(tuned, path)
    loaded = ait.load(fresh, path)
    with torch.no_grad():
        difference = (call(loaded, item).float() - call(tuned, item).float()).abs().max().item()
    print(f"checkpoint {path}: max abs difference after load {difference:.3g}")
    return difference


def arguments(doc: str, out: str, argv=None, sizes: bool = True) -> argparse.Namespace:
    """--executor ray|inline and --out; with sizes, --size base|tiny too."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if sizes:
        parser.add_argument("--size", choices=["base", "tiny"], default="base")
    parser.add_argument("--executor", choices=["ray", "inline"], default="ray")
    parser.add_argument("--out", default=out)
    return parser.parse_args(argv)
