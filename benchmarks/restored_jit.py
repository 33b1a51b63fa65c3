"""A JIT build kept from its build against one restored from its recipe, at each recorded batch size.

    python benchmarks/restored_jit.py --out OUT            # the ViT-B-sized fp16 encoder on the GPU
    python benchmarks/restored_jit.py --out OUT --backend jit-max --rounds 20

MaxThroughput releases a build that its first timings put out of reach, and restores it from its recipe
should it be re-measured after all; a Ray driver restores the chosen one to deploy it. A restored
torch.compile backend compiles at its first calls. With automatic dynamic shapes, the first batch size
it sees gets a graph with that size fixed, and the second a dynamic batch dimension, which from then on
serves every size. This times, at each recorded size, eager, the kept build (compiled on every recorded
sample by its build) and restored ones:
  - "restored, one size at a time": a fresh restore timed size by size (aitune_ray.measure.timing.measure),
    as the side-by-side rounds did before they called every size first: its first size on the static graph;
  - "restored, then every size once": a fresh restore after one call at every recorded size;
  - the side-by-side rounds as they run now (profile_side_by_side): eager, kept and another fresh restore.
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

import aitune_ray as ait  # noqa: E402
from aitune_ray.backend.backend import Backend  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig, measure, profile_side_by_side, see_every_size  # noqa: E402
from aitune_ray.recording import recording_session  # noqa: E402
from backends import BACKENDS, make_model  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--backend", default="jit", choices=sorted(k for k in BACKENDS if k.startswith("jit")))
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, data = make_model("encoder", device, torch.float16 if device.type == "cuda" else torch.float32)
    wrapped = ait.Module(model, "encoder")
    with recording_session(), torch.no_grad():
        for item in data:
            wrapped(item)
    samples = wrapped.samples
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

    def at(call, bs):
        group = [s for s in samples if s.batch_size == bs]
        return measure(lambda: call(*group[0].args, **group[0].kwargs), device, bs, cfg).median_ms

    rows = {}
    size_by_size = restored("size-by-size")
    rows["restored, one size at a time"] = {bs: at(size_by_size.infer, bs) for bs in sizes}
    rows["the same, timed again after that"] = {bs: at(size_by_size.infer, bs) for bs in sizes}
    all_first = restored("every-size-first")
    see_every_size({"restored": all_first.infer}, samples, device)
    rows["restored, then every size once"] = {bs: at(all_first.infer, bs) for bs in sizes}
    rows["kept from its build"] = {bs: at(kept.infer, bs) for bs in sizes}
    rows["eager"] = {bs: at(model, bs) for bs in sizes}
    side = profile_side_by_side({"eager": model, "kept": kept.infer, "restored": restored("side-by-side").infer},
                                samples, device, args.rounds, cfg)
    for name, per in side.items():
        rows[f"side by side ({args.rounds} rounds): {name}"] = {bs: t.median_ms for bs, t in per.items()}

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = (f"### {args.backend} on the encoder ({device}, {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU'},"
             f" torch {torch.__version__}): ms per call, bursts between two synchronizes")
    lines = [title, "", "| | " + " | ".join(f"bs {bs}" for bs in sizes) + " |", "|---|" + "---|" * len(sizes)]
    lines += [f"| {name} | " + " | ".join(f"{per[bs]:.3f}" for bs in sizes) + " |" for name, per in rows.items()]
    text = "\n".join(lines) + "\n"
    (out / "restored_jit.md").write_text(text)
    (out / "restored_jit.json").write_text(json.dumps({"backend": args.backend, "rows": {
        name: {str(bs): ms for bs, ms in per.items()} for name, per in rows.items()}}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
