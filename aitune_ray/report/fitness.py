"""Whether the host was fit to measure on, as the report says it, and what the user can do about it.

The decision record says so where it can (a ``host_unfit`` field or a ``verdict`` naming it, from an A/A
control: eager against itself, aitune_ray.decision), and the words are the decision's own.

On a CPU the cause is nearly always other work on the same cores: PyTorch's OpenMP thread team belongs to
the calling thread, and which thread runs a call, on which cores, changes its speed by up to 25x under
load. The user's levers are the process's CPU share and torch.set_num_threads; the report names both, with
what this run had (host_state()).
"""

from __future__ import annotations

import os

from aitune_ray.decision.verdict import HOST_UNFIT
from aitune_ray.report.model import ModuleReport

def host_state() -> dict:
    """What the process had to measure with: torch's threads, the CPUs it may run on, the load average."""
    import torch

    state = {"torch_threads": torch.get_num_threads(), "cpus": os.cpu_count()}
    try:
        state["cpus_allowed"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    try:
        state["load_average"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        pass
    return state


def unfit_reason(module: ModuleReport, recorded: dict | None = None) -> str:
    """Why the host was unfit to measure this module on, in words; "" when nothing says it was.

    recorded: the module's entry of the JSON report as written, which may carry fields this version of
    ModuleReport does not know (host_unfit, verdict)."""
    recorded = recorded or {}
    flag = recorded.get("host_unfit")
    if isinstance(flag, str) and flag.strip():
        return " ".join(flag.split())
    if isinstance(flag, dict):
        return " ".join(str(flag.get("reason") or flag.get("verdict") or "the decision found the host unfit").split())
    if flag is True:
        return " ".join(str(recorded.get("host_unfit_reason") or "the decision's control (eager against itself) "
                            "did not read 1").split())
    said = recorded.get("verdict")
    if isinstance(said, dict):
        said = said.get("reason") or said.get("verdict") or said.get("kind")
    if isinstance(said, str) and "unfit" in said.lower():
        return " ".join(said.split())
    verdict = getattr(module, "verdict", None) or {}
    if verdict.get("kind") == HOST_UNFIT:
        from aitune_ray.decision.verdict import Verdict
        from aitune_ray.report.verdict import decision_text

        return decision_text(Verdict.from_dict(verdict), {}).removeprefix("kept eager: ")
    return ""


def advice(device: str, state: dict | None = None) -> list[str]:
    """What the user can do about an unfit host, a sentence a line."""
    state = state or {}
    if str(device).startswith("cuda"):
        return ["Other work on this GPU or on its host's CPUs moved the timings.",
                "Tune on an otherwise idle GPU (nvidia-smi lists what else runs there), give the process CPU cores "
                "of its own, and tune again."]
    had = _had(state)
    return ["On a CPU, which thread runs a call, on which cores, changes its speed by up to 25x when other "
            "processes compete for the cores (PyTorch's OpenMP thread team belongs to the calling thread).",
            "Give the process cores of its own: stop other jobs, pin it (taskset -c 0-7 aitune-ray tune ...) or "
            "raise its container's CPU quota.",
            "Set torch.set_num_threads(N) (or OMP_NUM_THREADS=N) to at most the cores it really gets" +
            (f"; this run had {had}" if had else "") + ".",
            "Then tune again: the same job on a quiet host gives numbers you can rely on."]


def _had(state: dict) -> str:
    parts = []
    if state.get("torch_threads"):
        parts.append(f"{state['torch_threads']} torch thread(s)")
    if state.get("cpus_allowed") or state.get("cpus"):
        allowed, total = state.get("cpus_allowed"), state.get("cpus")
        parts.append(f"{allowed} of {total} CPUs allowed" if allowed and total else f"{allowed or total} CPUs")
    if isinstance(state.get("load_average"), (int, float)):
        parts.append(f"a load average of {state['load_average']:g}")
    return ", ".join(parts)
