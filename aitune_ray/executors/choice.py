"""Which executor runs a job when neither the user nor the job names one: the one rule, for the API and the CLI.

Ray pays for itself by building candidates side by side, one actor per GPU. Without a GPU to tune on and
without a cluster to send the work to, a local Ray has one actor: nothing runs in parallel, and its start and
its actor's own imports and compiles come on top (a pipeline example took 185 s on a local Ray against 110 s
inline on a 2-core CPU machine). So:

1. what the job or the command line asks for (``executor.type: ray`` or ``inline``, ``--executor``);
2. a Ray cluster address the job or the command line gives (``--address``, ``executor.address``): Ray;
3. then AITUNE_RAY_EXECUTOR=inline or =ray in the environment;
4. RAY_ADDRESS, which ``ray job submit`` sets: Ray;
5. Ray not installed: inline;
6. tuning for a CUDA GPU this machine has: Ray, one actor per GPU;
7. otherwise (no GPU here, or the job tunes for the CPU): inline.

Each choice carries its reason in words, which the CLI prints in one line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os

INLINE, RAY, AUTO = "inline", "ray", "auto"
KINDS = (AUTO, RAY, INLINE)


@dataclasses.dataclass(frozen=True)
class ExecutorChoice:
    kind: str      # "ray" or "inline"
    reason: str    # why, in words: "this machine has no GPU ..."

    def line(self) -> str:
        return f"executor: {self.kind} ({self.reason})"


def choose_executor(requested: str | None = None, address: str | None = None, device: str | None = None,
                    environ: dict | None = None, ray_installed: bool | None = None,
                    gpus: int | None = None) -> ExecutorChoice:
    """The executor for a job. requested: "ray", "inline", "auto" or None (auto); address: a Ray cluster's;
    device: the device asked for ("cpu", "cuda[:N]", "auto" or None). The last three are what this machine
    has, looked up when None (tests pass them)."""
    environ = os.environ if environ is None else environ
    if requested in (RAY, INLINE):
        return ExecutorChoice(requested, "the job asks for it")
    if address:   # named for this job: it outranks the environment's default
        return ExecutorChoice(RAY, f"a Ray cluster address is given: {address}")
    forced = str(environ.get("AITUNE_RAY_EXECUTOR", "")).strip().lower()
    if forced in (RAY, INLINE):
        return ExecutorChoice(forced, f"AITUNE_RAY_EXECUTOR={forced}")
    if environ.get("RAY_ADDRESS"):
        return ExecutorChoice(RAY, f"a Ray cluster address is given: {environ['RAY_ADDRESS']}")
    if ray_installed is None:
        ray_installed = importlib.util.find_spec("ray") is not None
    if not ray_installed:
        return ExecutorChoice(INLINE, "Ray is not installed; pip install 'aitune-ray[ray]' to build on Ray")
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus > 0 and str(device or AUTO) != "cpu":
        return ExecutorChoice(RAY, f"this machine has {gpus} GPU(s): one Ray actor per GPU builds in parallel")
    why = "the job tunes for the CPU" if gpus > 0 else "this machine has no GPU"
    return ExecutorChoice(INLINE, f"{why} and no Ray cluster address is given, so a local Ray would run one "
                                  "candidate at a time at extra cost; --executor ray uses Ray anyway")
