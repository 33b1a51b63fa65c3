"""What the example scripts share: their arguments, and the check after tuning (save, load into a fresh
model, compare outputs on one item)."""

import argparse

import torch

import aitune_ray as ait


def tune_save_and_compare(model, data: list[dict], device: str, args: argparse.Namespace, fresh) -> float:
    """ait.tune on args.executor (Ray or inline), print the report, then save_and_compare into fresh."""
    executor = ait.InlineExecutor() if args.executor == "inline" else ait.RayExecutor()
    report = ait.tune(model, data, device=device, executor=executor)
    print(report.markdown())
    return save_and_compare(model, fresh, args.out, data[0])


def save_and_compare(tuned, fresh, path, item: dict) -> float:
    """ait.save(tuned, path), ait.load(fresh, path), then the max abs difference of their outputs on item."""
    ait.save(tuned, path)
    loaded = ait.load(fresh, path)
    with torch.no_grad():
        difference = (loaded(**item).float() - tuned(**item).float()).abs().max().item()
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
