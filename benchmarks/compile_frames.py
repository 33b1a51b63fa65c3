"""Host time of a compiled module as more variants of its class are compiled in the same process.

    python benchmarks/compile_frames.py            # CPU or GPU, whatever the machine has
    python benchmarks/compile_frames.py --variants 9

A tuner compiles many variants of one module class in one process. This times, back to back, the first
compiled variant alone, then the first and the newest after --variants more were compiled with other
Inductor options: once with torch.compile(module) (every variant's graphs on the class's forward in
Dynamo's cache) and once with aitune_ray.frames.own_frame(module) (a code object per variant, as the
backends compile now). It also counts the graphs Dynamo compiled: past its recompile limit, a variant
compiled the first way is not compiled at all. Each way runs in a process of its own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aitune_ray.frames import own_frame  # noqa: E402
from forge_overhead import back_to_back_us  # noqa: E402


class Stack(nn.Module):
    def __init__(self, width: int = 16, depth: int = 6):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def per_call_us(fn, x, device) -> float:
    return back_to_back_us(lambda: fn(x), device, calls=2000, repeats=4)   # the first repeat warms up


def run(way: str, variants: int) -> str:
    from torch._dynamo.utils import counters

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(4, 16, device=device)
    wrap = (lambda m, i: m) if way == "torch.compile(module)" else (lambda m, i: own_frame(m, f"variant{i}"))
    with torch.no_grad():
        eager = Stack().eval().to(device)
        first = torch.compile(wrap(Stack().eval().to(device), 0))
        first(x)
        alone = per_call_us(first, x, device)
        newest = first
        for i in range(1, variants + 1):
            newest = torch.compile(wrap(Stack().eval().to(device), i), options={"max_fusion_size": 60 + i})
            newest(x)
        row = (f"| {way} | {per_call_us(eager, x, device):.1f} | {alone:.1f} | {per_call_us(first, x, device):.1f} | "
               f"{per_call_us(newest, x, device):.1f} | {counters['stats']['unique_graphs']} of {variants + 1} |")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", type=int, default=9, help="variants compiled after the first")
    parser.add_argument("--way", default=None, help=argparse.SUPPRESS)   # one way, in this process
    args = parser.parse_args()
    if args.way:
        print(run(args.way, args.variants))
        return 0
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"### Host time per call, us, of a compiled 6 x Linear(16) on {where}, {args.variants} more variants\n")
    print("| compiled as | eager | first variant alone | first variant after | newest variant | graphs compiled |")
    print("|---|---|---|---|---|---|")
    for way in ("torch.compile(module)", "own_frame(module)"):
        out = subprocess.run([sys.executable, __file__, "--variants", str(args.variants), "--way", way],
                             capture_output=True, text=True, check=False)
        rows = [line for line in out.stdout.splitlines() if line.startswith("|")]
        print(rows[-1] if rows else f"| {way} | failed: {out.stderr.strip()[-200:]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
