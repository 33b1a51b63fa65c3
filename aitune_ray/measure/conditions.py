"""What this process did that changes how fast it launches work, for the reports of timings taken later.

A CUDA profile that leaves CUPTI attached (Kineto's default; the kernel profiler detaches it, except in a
Ray driver, where the detach hangs the process at exit: there the profile is made in a child process, and
only when that fails in the driver itself) makes every later kernel launch in this process
cost more: 25-63% per call of a host-bound encoder at batch 8 on an H200 (docs/measurement.md). A
timing taken afterwards in this process favours whatever launches fewer kernels.
"""

from __future__ import annotations

_cupti_attached = False

CUPTI_NOTE = ("timed in a process whose CUDA profile left CUPTI attached (a Ray driver that profiled for a "
              "kernel plan itself, its child process having failed; see the log): each kernel launch costs more here, which favours the candidate with fewer "
              "launches; a fresh process, a user's, measures without it")


def mark_cupti_attached() -> None:
    global _cupti_attached
    _cupti_attached = True


def cupti_attached() -> bool:
    """Whether a CUDA profile in this process left CUPTI attached."""
    return _cupti_attached
