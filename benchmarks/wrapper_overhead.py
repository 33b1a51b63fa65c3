"""What the deployed module's layers cost per call, over a backend that does nothing: the wrapped Module, a
backend's infer(), and a batch-size dispatch in front of it.

    python benchmarks/wrapper_overhead.py [--calls 200000] [--out OUT/wrapper_overhead.md]

Every figure is the best of 5 timeit repeats, in microseconds per call, with gradients off as in a serving
loop (and the wrapped Module once with them on). On a GPU a host-bound call of about 1 ms (a CUDA-graph
replay of a ViT-B at batch 8) pays these microseconds in full; they are the floor under any backend's
speedup there.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend.backend import Backend  # noqa: E402
from aitune_ray.backend.batch_dispatch import BatchDispatchBackend  # noqa: E402
from aitune_ray.samples import SampleStore  # noqa: E402


class Passthrough(torch.nn.Module):
    def forward(self, x):
        return x


class NothingBackend(Backend):
    """A backend whose call returns its input: what is left is the layers around it."""

    def _build(self, module, samples, device, workdir) -> None:
        pass

    def _infer(self, *args, **kwargs):
        return args[0]


def best_us(fn, calls: int) -> float:
    return min(timeit.repeat(fn, number=calls, repeat=5)) / calls * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--out", help="write the table here as well")
    args = parser.parse_args()
    cpu = torch.device("cpu")
    small, large = NothingBackend(), NothingBackend()
    for backend in (small, large):
        backend.build(Passthrough(), SampleStore(), cpu, Path(tempfile.mkdtemp()))
    dispatch = BatchDispatchBackend.assemble(Passthrough(), {"s": small, "l": large}, {8: "s", 32: "l"}, cpu)
    single, routed = ait.Module(Passthrough()), ait.Module(Passthrough())
    single.use_backend(small)
    routed.use_backend(dispatch)
    x = torch.ones(8, 3)
    rows = {"backend._infer (the backend's own work, here none)": lambda: small._infer(x),
            "backend.infer()": lambda: small.infer(x),
            "dispatch.infer() over two backends": lambda: dispatch.infer(x),
            "Module(...) with one backend": lambda: single(x),
            "Module(...) with the dispatch": lambda: routed(x)}
    lines = [f"### Host time per call of the deployed module's layers ({platform.processor() or platform.machine()}, "
             f"torch {torch.__version__})", "", "| layer | us per call |", "|---|---|"]
    with torch.no_grad():
        for name, fn in rows.items():
            lines.append(f"| {name} | {best_us(fn, args.calls):.2f} |")
    graded = best_us(rows["Module(...) with one backend"], args.calls)
    lines.append(f"| Module(...) with one backend, called with gradients on | {graded:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
