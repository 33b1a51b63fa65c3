"""Helpers the example scripts share (not an example itself): their arguments, and the check after tuning (save,
model, compare outputs on one item)."""

import argparse
import importlib.util
import sys

import torch

import aitune_ray as ait


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
    """ait.tune on args.executor (Ray or inline), print the report, then save_and_compare into fresh."""
    rounds = 5 if getattr(args, "size", "base") == "tiny" else 30      # side-by-side re-measure rounds
    executor = ait.InlineExecutor(rounds) if args.executor == "inline" else ait.RayExecutor(remeasure_rounds=rounds)
    report = ait.tune(model, data, device=device, executor=executor, call_as_given=True)
    print(report.markdown())
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


def block_unloadable_torchvision() -> str | None:
    """Where torchvision is installed but cannot load beside this torch (PyPI's CUDA build of torchvision beside
    a CPU-only torch: "operator torchvision::nms does not exist"), make it absent for this process, so that
    transformers and diffusers, which use it only where it is there, still import. Call it before importing them.
    Returns why torchvision is unusable here, or None where it loads or is not installed."""
    if "torchvision" in sys.modules:
        return _TORCHVISION_BLOCKED.get("why") if sys.modules["torchvision"] is None else None
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision  # noqa: F401
        return None
    except Exception as exc:  # noqa: BLE001 - any failure to load makes it unusable
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision"] = None   # import torchvision now raises ImportError, as if not installed
        _TORCHVISION_BLOCKED["why"] = f"torchvision cannot load beside torch {torch.__version__}: " \
                                      f"{type(exc).__name__}: {exc}"
        return _TORCHVISION_BLOCKED["why"]


_TORCHVISION_BLOCKED: dict[str, str] = {}
