"""Build one candidate backend, check it against eager, profile it: the unit of work of every executor."""

from __future__ import annotations

import logging
import platform
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from aitune_ray.backend.backend import Backend
from aitune_ray.runtime.device import gpu_identity
from aitune_ray.records.failures import outcome
from aitune_ray.measure.correctness import compare_outputs
from aitune_ray.measure.request import ServingContext, TimingRequest
from aitune_ray.measure.turns import NO_TURNS
from aitune_ray.records.results import ERROR, OK, REJECTED, BuildResult, CandidateJob
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)


def run_candidate(job: CandidateJob, module: nn.Module, samples: SampleStore, device: torch.device,
                  workdir: Path, log_path: str = "",
                  stage: Callable[[str], None] | None = None, turns=NO_TURNS) -> tuple[BuildResult, Backend | None]:
    """Build, check and profile job's backend. Never raises for the backend's own failures.

    Returns the result record and, when the candidate is usable, the live built backend. stage: told
    "checking" and then "measuring" as the build's stages begin (a progress event each, inline). turns:
    the device's turns (aitune_ray.measure.turns) where other processes share it: the build and its
    check take a build's turn, the profile a timing's (the export, host work that is mostly file copies,
    waits for neither).
    """
    stage = stage or (lambda name: None)
    device = torch.device(device)
    result = BuildResult(key=job.key, backend=job.backend_name, spec=job.spec,
                         status=ERROR, device=str(device), gpu=gpu_identity(device), node=platform.node(),
                         log_path=log_path)
    backend = None
    started = time.perf_counter()
    stage_name = "build"
    try:
        backend = Backend.from_spec(job.spec)
        with turns.building():
            backend.build(module, samples, device, Path(workdir) / job.key)
            result.build_s = time.perf_counter() - started
            stage("checking")
            stage_name = "correctness check"
            with torch.no_grad():
                pairs = [(backend.infer(*s.args, **s.kwargs), s.outputs) for s in samples]
        tolerance = job.tolerance if job.tolerance is not None else backend.default_tolerance
        report = compare_outputs(pairs, tolerance)
        result.correctness = report.to_dict()
        if not report.passed:
            result.status, result.error = REJECTED, report.reason
            logger.info("%s rejected: %s", backend.describe(), report.reason)
            return result, None
        stage("measuring")
        stage_name = "profiling"
        with turns.timing():
            request = TimingRequest.alone("profile", device, ServingContext.from_dict(job.context), job.measure)
            timings = request.run({"candidate": backend.infer}, samples, device).timings["candidate"]
        result.timings = {bs: t.to_dict() for bs, t in timings.items()}
        stage_name = "export"
        result.state, artifacts = backend.export()
        result.artifacts = {name: str(path) for name, path in artifacts.items()}
        result.status = OK
        return result, backend
    except BaseException as exc:  # a backend may raise anything; KeyboardInterrupt still propagates
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        result.build_s = result.build_s or time.perf_counter() - started
        failure = outcome(stage_name, exc=exc)
        result.status, result.error_type, result.error = failure.status, failure.error_type, failure.error
        logger.warning("%s: %s", job.key, result.error)
        logger.debug("%s", traceback.format_exc())
        result.exception = exc
        return result, None
    finally:
        result.total_s = time.perf_counter() - started
        if device.type == "cuda" and result.status != OK:
            torch.cuda.empty_cache()
