"""Does the way I call the tuned model move the speedup I see? The README's main job tuned inline once, then
its checkpoint against eager in several forms of a user's loop, side by side in one process.

    python benchmarks/loop_forms.py --width 1024 --blocks 8 --out OUT/forms.md

Forms, each N passes back to back, one synchronize on a GPU, a wall clock, eager and tuned alternating in
pairs (the interval: the median paired ratio's, as the decision's):
- mixed: every recorded item in the order recorded (batch sizes interleaved), the tuned model called
  through its aitune_ray.Module (as a user serves it);
- bs N: only the items of one batch size (how the confirm session times: one size at a time);
- mixed, backend only: as mixed, but the tuned backend called directly (no wrapper): what the wrapper's own
  call costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from figures_agree import job_of, paired_loops, run_job, text_of  # noqa: E402
from results_table import publish  # noqa: E402

import torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int)
    parser.add_argument("--blocks", type=int)
    parser.add_argument("--batch-sizes", help="the recorded batch sizes, e.g. 64,256 (the job's: 4,16)")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--loops", type=int, default=30)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out")
    args = parser.parse_args()
    import aitune_ray as ait
    from examples.mlp.model import make_data, make_model

    job = job_of(args.width, args.blocks, args.batch_sizes)
    run = run_job("inline", torch.get_num_threads(), Path(tempfile.mkdtemp(prefix="loop-forms-")), job)
    if run.get("chosen") in (None, "eager"):
        publish(f"The job kept eager or failed ({run.get('decision') or run.get('error', '')[:300]}): nothing to "
                "compare.", args.out, {"run": run}, "loop_forms")
        return
    device = torch.device(args.device)
    data = [x.to(device) for x in make_data(**job["data_args"])]
    eager = make_model(**job["model_args"]).eval().to(device)
    tuned = ait.load(ait.Module(make_model(**job["model_args"]).eval().to(device), "mlp"), run["checkpoint"])
    forms = {"mixed (as served)": paired_loops(eager, tuned, data, args.calls, args.loops, args.device)}
    for bs in sorted({x.shape[0] for x in data}):
        forms[f"bs {bs} only"] = paired_loops(eager, tuned, [x for x in data if x.shape[0] == bs], args.calls,
                                              args.loops, args.device)
    with tuned.unpatched():   # the module's own forward in place, as the wrapper puts it for each call
        forms["mixed, backend only"] = paired_loops(eager, tuned.backend.infer, data, args.calls, args.loops,
                                                    args.device)
    lines = [f"The README's main job (model {job['model_args']}) tuned inline: {run['chosen']}, decision "
             f"{text_of(run.get('interval'))} over the recorded mix; {device.type} with {torch.get_num_threads()} "
             "torch threads", "", "| loop form | speedup [95% interval] | eager ms per pass |", "|---|---|---|"]
    lines += [f"| {name} | {text_of(i)} | {i['eager_ms_per_pass']:.3f} |" for name, i in forms.items()]
    run["checkpoint"] = Path(run["checkpoint"]).name
    publish("\n".join(lines), args.out, {"run": run, "forms": forms, "device": device.type,
                                         "model_args": job["model_args"]}, "loop_forms")


if __name__ == "__main__":
    main()
