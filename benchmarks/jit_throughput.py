"""Does the program keep its pace while it is tuned just in time, and when does it switch?

    python benchmarks/jit_throughput.py --out OUT                  # a BERT encoder on the CPU, 60 s of calls
    python benchmarks/jit_throughput.py --out OUT --device cuda --seconds 120

One process holds two copies of the same model (a BERT built from a config, seeded weights): `eager`, made
before JIT tuning is enabled (plain torch), and `jit`, made after (`import aitune_ray.jit.enable`, TUNE_EAGER,
min_samples 1, the default executor: builds in a child process, or on Ray where it runs, beside the program;
MaxThroughput over ONNX Runtime on the CPU, Inductor on a GPU, confirmed beside eager). The loop calls them in
pairs, alternating which goes first, each call timed alone (on a GPU between synchronizes), so that every
comparison is of two calls made at the same moment, under the same load (the build's included). A first part
(--overhead-seconds, at least --overhead-pairs pairs) runs the JIT mode with dry_run (tracked and recorded, nothing built) against eager: the
measuring overhead alone. Then the JIT run: its calls go on eagerly until the verdict, and the next call
switches. Nothing waits for tuning.

Reported: per window of --window seconds, calls per second of each copy and the median of the per-pair ratio
jit / eager; the overhead (dry run) ratio; when the switch came (seconds, call number) and to what; the
median ratio before and after the switch. A ratio before the switch above the overhead's is time the program
lost to tuning beside it; the build's use of the machine slows both copies alike and shows in calls/s.
Results: OUT/jit_throughput.json and OUT/jit_throughput.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


MODELS = {"bert": "BertModel(hidden 128, 4 layers), batch 8 x 64 tokens",
          "mlp": "48 x (Linear(64, 64), relu), batch 4: bound by the per-layer cost of eager calls"}


def _deep_mlp_class():
    import torch

    class DeepMLP(torch.nn.Module):
        """48 Linear(64, 64) + ReLU layers (a class of its own: the JIT mode never tracks containers)."""

        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(48))

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    return DeepMLP


def make_model(device: str, name: str = "bert"):
    import torch

    torch.manual_seed(0)
    if name == "mlp":
        return _deep_mlp_class()().eval().to(device)
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256,
                        vocab_size=1000, max_position_embeddings=128)
    return BertModel(config).eval().to(device)


def make_inputs(device: str, name: str = "bert") -> dict:
    import torch

    if name == "mlp":
        return {"x": torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).to(device)}
    return {"input_ids": torch.randint(0, 1000, (8, 64), generator=torch.Generator().manual_seed(0)).to(device),
            "attention_mask": torch.ones(8, 64, dtype=torch.long, device=device)}


def paired_loop(eager, jit, inputs: dict, seconds: float, sync, head=None, min_pairs: int = 0) -> list[dict]:
    """Call eager and jit in pairs (alternating which goes first) for `seconds` and at least min_pairs
    pairs; one entry per pair."""
    import torch

    pairs = []
    start = time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - start < seconds or len(pairs) < min_pairs:
            order = (("eager", eager), ("jit", jit)) if len(pairs) % 2 == 0 else (("jit", jit), ("eager", eager))
            pair = {}
            for name, model in order:
                sync()
                began = time.perf_counter()
                model(**inputs)
                sync()
                pair[name] = time.perf_counter() - began
            pair["t"] = time.perf_counter() - start
            if head is not None:
                pair["state"] = head.state.value
            pairs.append(pair)
    return pairs


def windows(pairs: list[dict], width: float) -> list[dict]:
    found = []
    count = int(pairs[-1]["t"] // width) + 1 if pairs else 0
    for index in range(count):
        inside = [p for p in pairs if index * width <= p["t"] < (index + 1) * width]
        if not inside:
            continue
        span = sum(p["eager"] + p["jit"] for p in inside) or 1.0
        found.append({"from_s": index * width, "pairs": len(inside),
                      "eager_calls_per_s": round(len(inside) / sum(p["eager"] for p in inside), 2),
                      "jit_calls_per_s": round(len(inside) / sum(p["jit"] for p in inside), 2),
                      "jit_over_eager": round(statistics.median(p["jit"] / p["eager"] for p in inside), 3),
                      "busy_share": round(span / width, 3),
                      "jit_states": sorted({p.get("state", "") for p in inside})})
    return found


def ratio(pairs: list[dict]) -> float | None:
    return round(statistics.median(p["jit"] / p["eager"] for p in pairs), 4) if pairs else None


def measure(args) -> dict:
    import torch

    device = args.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    inputs = make_inputs(device, args.model)
    eager = make_model(device, args.model)                # made before JIT tuning is enabled: plain torch

    import aitune_ray.jit.enable  # noqa: F401
    import aitune_ray as ait
    from aitune_ray.jit import registry
    from aitune_ray.jit.config import config as jit_config

    backend = ait.backend.ONNXRuntimeBackend() if device == "cpu" else ait.backend.TorchInductorJitBackend()
    jit_config.strategy = ait.MaxThroughputStrategy([backend])
    jit_config.cache_dir = tempfile.mkdtemp(prefix="jit-throughput-")   # fresh: the run tunes

    jit_config.dry_run = True                   # the measuring overhead alone: tracked, recorded, not built
    tracked = make_model(device, args.model)
    overhead = paired_loop(eager, tracked, inputs, args.overhead_seconds, sync, min_pairs=args.overhead_pairs)

    jit_config.dry_run = False
    jit = make_model(device, args.model)
    with torch.no_grad():
        jit(**inputs)                           # its first call: recorded; tuning starts beside the program
    head = next(h for h in registry.heads if h.__wrapped__ is jit)
    pairs = paired_loop(eager, jit, inputs, args.seconds, sync, head)
    switch = next((i for i, p in enumerate(pairs) if p["state"] == "tuned"), None)
    before, after = (pairs[:switch], pairs[switch:]) if switch is not None else (pairs, [])
    return {
        "config": {"device": device, "seconds": args.seconds, "overhead_seconds": args.overhead_seconds,
                   "window": args.window, "model": MODELS[args.model],
                   "backend": backend.describe(), "torch_threads": torch.get_num_threads()},
        "eager_median_call_s": round(statistics.median(p["eager"] for p in pairs), 6),
        "overhead_jit_over_eager": ratio(overhead[1:]),
        "verdict": {"state": head.state.value, "info": head.info},
        "switch": None if switch is None else {"pair": switch, "seconds": round(pairs[switch]["t"], 2),
                                               "module_call": head.switched_at_call},
        "before_switch_jit_over_eager": ratio(before),
        "after_switch_jit_over_eager": ratio(after),
        "windows": windows(pairs, args.window),
        "overhead_windows": windows(overhead, args.window),
    }


def markdown(result: dict) -> str:
    switch = result["switch"]
    lines = [f"# JIT tuning: the program's pace over time ({result['config']['device']})", "",
             f"{result['config']['model']}; {result['config']['backend']}; eager median call "
             f"{result['eager_median_call_s'] * 1e3:.2f} ms; torch threads {result['config']['torch_threads']}.",
             "",
             f"- measuring overhead (dry run, median jit / eager per pair): {result['overhead_jit_over_eager']}",
             f"- verdict: {result['verdict']['state']} ({result['verdict']['info']})",
             f"- switch: " + ("none within the run" if switch is None else
                              f"after {switch['seconds']} s (the module's call {switch['module_call']})"),
             f"- before the switch, median jit / eager per pair: {result['before_switch_jit_over_eager']}",
             f"- after the switch, median jit / eager per pair: {result['after_switch_jit_over_eager']}", "",
             "| from (s) | pairs | eager calls/s | jit calls/s | jit / eager (median) | jit state |",
             "|---|---|---|---|---|---|"]
    for w in result["windows"]:
        lines.append(f"| {w['from_s']:g} | {w['pairs']} | {w['eager_calls_per_s']} | {w['jit_calls_per_s']} | "
                     f"{w['jit_over_eager']} | {', '.join(w['jit_states'])} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", choices=sorted(MODELS), default="bert")
    parser.add_argument("--seconds", type=float, default=60.0, help="the JIT run's length")
    parser.add_argument("--overhead-seconds", type=float, default=10.0, help="the dry run's length")
    parser.add_argument("--overhead-pairs", type=int, default=200, help="the dry run's least number of pairs")
    parser.add_argument("--window", type=float, default=5.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args)
    (args.out / "jit_throughput.json").write_text(json.dumps(result, indent=1))
    (args.out / "jit_throughput.md").write_text(markdown(result))
    sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
