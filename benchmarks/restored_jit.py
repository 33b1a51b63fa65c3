"""A JIT build kept from its build against one restored from its recipe, at each recorded batch size.

    python benchmarks/restored_jit.py --out OUT            # the ViT-B-sized fp16 encoder on the GPU
    python benchmarks/restored_jit.py --out OUT --backend jit-max --rounds 20

MaxThroughput releases a build that its first timings put out of reach, and restores it from its recipe
should it be re-measured after all; a Ray driver restores the chosen one to deploy it. A restored
torch.compile backend compiles at its first calls. With automatic dynamic shapes, the first batch size
it sees gets a graph with that size fixed, and the second a dynamic batch dimension, which from then on
serves every size. This times, in paired rounds (profile_side_by_side) at the first recorded size, eager,
the kept build (compiled on every recorded sample by its build) and a fresh restore that has seen only
that size (its static graph: how the side-by-side rounds timed a restore before they called every size
first); then the same three after the restore has seen every size; then eager, kept and another fresh
restore at every size, as the tuner's rounds run now.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from aitune_ray.backend.backend import Backend  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig, profile_side_by_side, see_every_size  # noqa: E402
from aitune_ray.samples import SampleStore  # noqa: E402
from backends import BACKENDS, recorded_encoder  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="jit", choices=sorted(k for k in BACKENDS if k.startswith("jit")))
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, samples = recorded_encoder(device)
    work = Path(tempfile.mkdtemp(prefix="restored-jit-"))
    kept = BACKENDS[args.backend]()
    kept.build(model, samples, device, work / "kept")
    kept.activate()

    def restored(tag: str) -> Backend:
        backend = Backend.from_spec(kept.spec())
        backend.restore(model, {}, {}, device, work / tag)
        backend.activate()
        return backend

    cfg = MeasureConfig()
    sizes = samples.batch_sizes()
    first = sizes[0]
    only_first = SampleStore([s for s in samples if s.batch_size == first], calls_seen=1)
    rows = {}
    # Paired rounds at the first size alone: the restore has seen no other size, so it runs a graph with
    # that size fixed, the kept build its dynamic one.
    fresh = restored("fresh")
    side = profile_side_by_side({"eager": model, "kept": kept.infer, "restored": fresh.infer}, only_first, device,
                                args.rounds, cfg)
    for name, per in side.items():
        rows[f"{name}: the restore has seen only bs {first}"] = {first: per[first].median_ms}
    # The restore sees the other sizes (its dynamic graph now serves every size), then the same rounds again.
    see_every_size({"restored": fresh.infer}, samples, device)
    side = profile_side_by_side({"eager": model, "kept": kept.infer, "restored": fresh.infer}, only_first, device,
                                args.rounds, cfg)
    for name, per in side.items():
        rows[f"{name}: the restore has seen every size"] = {first: per[first].median_ms}
    # The rounds as they run now, at every size, with a third restore.
    side = profile_side_by_side({"eager": model, "kept": kept.infer, "restored": restored("side-by-side").infer},
                                samples, device, args.rounds, cfg)
    for name, per in side.items():
        rows[f"{name}: side by side at every size, as the tuner times now"] = {bs: t.median_ms for bs, t in per.items()}

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = (f"### {args.backend} on the encoder ({device}, {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'},"
             f" torch {torch.__version__}): ms per call, bursts between two synchronizes")
    lines = [title, "", "| | " + " | ".join(f"bs {bs}" for bs in sizes) + " |", "|---|" + "---|" * len(sizes)]
    lines += [f"| {name} | " + " | ".join(f"{per[bs]:.3f}" if bs in per else "-" for bs in sizes) + " |"
              for name, per in rows.items()]
    text = "\n".join(lines) + "\n"
    (out / "restored_jit.md").write_text(text)
    (out / "restored_jit.json").write_text(json.dumps({"backend": args.backend, "rows": {
        name: {str(bs): ms for bs, ms in per.items()} for name, per in rows.items()}}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
