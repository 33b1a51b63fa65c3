"""The worker core: what one device does for the tuner, without Ray.

A Worker holds, per module, its eager module and recorded samples on this worker's device, and the
backends built here. It builds, checks and profiles candidates (candidate.run_candidate), times eager,
screens each candidate, runs confirm sessions (aitune_ray.decision) and runs the kernel forge's tasks. InlineExecutor calls
it directly in the driver; each Ray TunerActor (actors/tuner.py) is a thin shell around one.

A worker that shares its GPU with other workers (shares_gpu) takes turns at it (aitune_ray.measure.turns):
its timings have the GPU alone, its builds run beside the others' builds.

Right after a build, the candidate is screened (paired with eager here, aitune_ray.decision.screen). Only
builds that can still be finalists are kept (the strategy releases the others, or keep_built=False releases
each build once its result is recorded); a finalist that was released, or built elsewhere, is restored for the
confirm session from its spec, exported state and artifacts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import torch

import aitune_ray.records.artifacts as artifacts
from aitune_ray.backend.backend import Backend
from aitune_ray.worker.candidate import run_candidate
from aitune_ray.records.failures import outcome
from aitune_ray.kernel_forge.tasks import TIMED_TASKS, ForgeTasks
from aitune_ray.measure.request import ThreadsChanged, TimingRequest
from aitune_ray.measure.turns import turns_for
from aitune_ray.records.results import BuildResult, CandidateJob

logger = logging.getLogger(__name__)


def plain_name(name: str) -> str:
    """A module name as a file name (never '..': the rule is artifacts.plain_part)."""
    return artifacts.plain_part(name)


def device_for(intent: str) -> torch.device:
    """The driver says cpu or cuda; a worker uses its own current GPU when it has CUDA."""
    if intent == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def expose_main_globals(module: torch.nn.Module) -> list[str]:
    """Make the globals of classes defined in the driver's __main__ visible in this process's __main__.

    Such classes arrive pickled by value, each function with a globals dict of its own named "__main__".
    When Dynamo inlines one of their methods (a submodule's forward, called from a compiled parent's), it
    resolves that method's globals by importing "__main__", which in a worker process is the worker's own
    script, and fails ("module '__main__' has no attribute 'F'"). Names __main__ already has are left
    alone. Returns the names added."""
    main = sys.modules.get("__main__")
    if main is None:
        return []
    added = []
    for cls in {type(m) for m in module.modules()}:
        if cls.__module__ != "__main__":
            continue
        for value in vars(cls).values():
            func = getattr(value, "__func__", value)
            for name, obj in (getattr(func, "__globals__", None) or {}).items():
                if not name.startswith("__") and not hasattr(main, name):
                    setattr(main, name, obj)
                    added.append(name)
    if added:
        logger.info("classes from the driver's __main__: their globals %s are now visible in this process's "
                    "__main__ (for Dynamo)", sorted(added))
    return added


class Worker:
    """identity: {"node", "gpu"} stamped on every result. workdir: where builds write their files.
    keep_built: keep every successful build alive (else each is released once its result is recorded).
    shares_gpu: other processes use this worker's GPU too: timings wait for their turn there."""

    def __init__(self, workdir: Path, identity: dict | None = None, log_path: str = "", keep_built: bool = True,
                 shares_gpu: bool = False):
        self.workdir = Path(workdir)
        self.shares_gpu = shares_gpu
        self.identity = dict(identity or {})
        self.log_path = log_path
        self.keep_built = keep_built
        self.forge = ForgeTasks(self.identity)
        self.loads = 0
        self.baselines = 0
        self.restores = 0           # finalists restored from their spec here (built elsewhere, or released)
        self.peak_memory_bytes = 0
        self._modules: dict[str, tuple[Any, torch.nn.Module, Any, torch.device]] = {}
        self._built: dict[tuple[str, str], Backend] = {}
        self._workdirs: dict[str, Path | None] = {}

    # ----- modules ------------------------------------------------------------------------------
    def load(self, name: str, token: Any, fetch: Callable[[], tuple], device: torch.device,
             workdir: Path | None = None, as_is: bool = False) -> tuple:
        """(module, samples, device) of name here; fetch() -> (module, samples) runs once per token.
        workdir: where this module's builds go (None: a folder of this worker's, removed by discard).
        as_is: the module and samples are already on device and are used unchanged (the caller's own)."""
        cached = self._modules.get(name)
        if cached is not None and cached[0] == token:
            return cached[1], cached[2], cached[3]
        self.discard(name)
        module, samples = fetch()
        if not as_is:
            expose_main_globals(module)
            module = module.to(device).eval()
            samples = samples.to(device)
        self.loads += 1
        self._modules[name] = (token, module, samples, device)
        self._workdirs[name] = Path(workdir) if workdir is not None else None
        logger.info("loaded module %s (%d samples) onto %s", name, len(samples), device)
        return module, samples, device

    def close(self) -> None:
        """Forget every module and build here, and remove the work folder."""
        for name in list(self._modules):
            self.discard(name)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def discard(self, name: str) -> None:
        """Forget the module and everything built for it here (and the kernel forge's samples)."""
        self._modules.pop(name, None)
        own = self._workdirs.pop(name, None) is None
        self.forge.clear()
        for key in [k for k in self._built if k[0] == name]:
            self._release(key)
        if own:
            shutil.rmtree(self.workdir / plain_name(name), ignore_errors=True)
        self._free()

    def _workdir(self, name: str) -> Path:
        return self._workdirs.get(name) or self.workdir / plain_name(name)

    def built(self, name: str, key: str) -> Backend | None:
        return self._built.get((name, key))

    def take(self, name: str, finalist: dict) -> Backend:
        """The active backend of finalist (restored when it is not built here), no longer held here: the
        caller owns it (discard does not touch it)."""
        backend = self.restore(name, finalist)
        del self._built[(name, finalist["key"])]
        return backend

    def built_keys(self) -> list[str]:
        return sorted(k for _, k in self._built)

    # ----- work ---------------------------------------------------------------------------------
    def baseline(self, name: str, request: dict) -> dict[int, dict]:
        """Eager timed here as request (a TimingRequest's dict) says: {batch size: Timing.to_dict()}."""
        module, samples, device = self._modules[name][1:]
        logger.info("timing eager %s on %s", name, device)
        self.baselines += 1
        with self.turns(device).timing():
            session = TimingRequest.from_dict(request).run({"eager": module}, samples, device)
        self._note_memory(device)
        return session.plain("eager")

    def run(self, name: str, job: CandidateJob, stage: Callable[[str], None] | None = None) -> BuildResult:
        """Build, check and profile one candidate; keep the backend when it succeeded (and keep_built)."""
        module, samples, device = self._modules[name][1:]
        logger.info("candidate %s of %s on %s", job.key, name, device)
        result, backend = run_candidate(job, module, samples, device, self._workdir(name),
                                        self.log_path, stage=stage, turns=self.turns(device))
        if self.identity:
            result.node, result.gpu = self.identity.get("node", result.node), self.identity.get("gpu", result.gpu)
        if backend is not None and job.screen:
            self._screen(module, samples, device, job, result, backend)
            if not result.ok:
                backend.deactivate()
                backend = None
        self._note_memory(device)
        result.peak_memory_bytes = self.peak_memory_bytes
        if backend is not None:
            backend.deactivate()
            self._built[(name, job.key)] = backend
            if not self.keep_built:
                self.release(name, job.key)
        logger.info("candidate %s: %s %s", job.key, result.status, result.error)
        return result

    def pack(self, name: str, result: BuildResult, limit_bytes: int, artifact_dir: str | None) -> dict[str, Path]:
        """Make result's artifacts travel (aitune_ray.records.artifacts.pack); returns the files too large for
        both ways, for the caller to ship. A failure makes the result an error, and its build is dropped."""
        if not result.ok:
            return {}
        try:
            result.artifacts, large = artifacts.pack(result.artifacts, limit_bytes=limit_bytes,
                                                     artifact_dir=artifact_dir,
                                                     prefix=f"{plain_name(name)}/{result.key}")
            return large
        except Exception as exc:
            logger.exception("artifact transfer of %s failed", result.key)
            failure = outcome("artifact transfer", exc=exc)
            result.status, result.error_type, result.error = failure.status, failure.error_type, failure.error
            result.artifacts = {}
            self.release(name, result.key)
            return {}

    def release(self, name: str, key: str) -> None:
        """Drop one build (it is restored from its result when it is needed again)."""
        if self._release((name, key)):
            self._free()

    def restore(self, name: str, finalist: dict) -> Backend:
        """An active backend for finalist ({"key", "spec", "state", "artifacts"}): the one built here, else
        one restored from its spec, state and artifacts (then kept)."""
        module, _, device = self._modules[name][1:]
        backend = self._built.get((name, finalist["key"]))
        if backend is None:
            where = self._workdir(name) / "restored" / finalist["key"]
            files = artifacts.fetch(finalist.get("artifacts") or {}, where)
            backend = Backend.from_spec(finalist["spec"])
            backend.restore(module, finalist.get("state") or {}, files, device, where)
            self._built[(name, finalist["key"])] = backend
            self.restores += 1
        backend.activate()
        return backend

    def _screen(self, module, samples, device, job: CandidateJob, result: BuildResult, backend: Backend) -> None:
        """Screening (aitune_ray.decision.screen): the candidate, as the user calls it, paired with eager in
        shuffled rounds per batch size on this device, right after its build, as job.screen (a TimingRequest's
        dict) says. A candidate that fails here has failed."""
        request = TimingRequest.from_dict(job.screen)
        try:
            with self.turns(device).timing():
                timed = request.run({"eager": module, "candidate": as_user_calls(module, backend)}, samples,
                                    device).timings
        except Exception as exc:
            logger.exception("screening of %s failed", job.key)
            failure = outcome("screening", exc=exc)
            result.status, result.error_type, result.error = failure.status, failure.error_type, failure.error
            return
        result.screen = {"eager": {bs: t.rounds_ms for bs, t in timed["eager"].items()},
                         "candidate": {bs: t.rounds_ms for bs, t in timed["candidate"].items()},
                         "rounds": request.rounds}

    def confirm(self, name: str, finalists: list[dict], request: dict) -> dict:
        """The confirm session of name's finalists, here (aitune_ray.decision.session): each finalist restored
        as it is deployed (the build held here, else restored from its spec, state and artifacts), an A/A
        control restored alike, all called as the user calls them, in paired shuffled rounds per batch size.
        Returns {"eager", "control", "results" (key -> timings), "errors" (key -> why not), "failed", "node",
        "gpu"}."""
        module, samples, device = self._modules[name][1:]
        backends: dict[str, Backend] = {}
        errors: dict[str, str] = {}
        turns = self.turns(device)
        for finalist in finalists:
            try:
                with turns.building():
                    backends[finalist["key"]] = self.restore(name, finalist)
            except Exception as exc:
                logger.exception("cannot restore %s for the confirm session", finalist["key"])
                errors[finalist["key"]] = f"{type(exc).__name__}: {exc}"
        where = self.identity.get("gpu", str(device))
        try:
            with turns.timing():
                out = confirm_session(module, samples, device, backends, TimingRequest.from_dict(request),
                                      self._workdir(name) / "control")
        finally:
            for backend in backends.values():
                backend.deactivate()
        self._note_memory(device)
        logger.info("confirm session of %s and %d finalist(s) on %s: %s", name, len(backends), where,
                    out.get("failed") or "ok")
        return {**out, "errors": errors, "node": self.identity.get("node", ""), "gpu": self.identity.get("gpu", "")}

    def forge_task(self, task: str, box: tuple, device: torch.device, *args: Any) -> dict:
        """One kernel-forge task (aitune_ray.kernel_forge.tasks.ForgeTasks); those that time the GPU
        (TIMED_TASKS) take a timing's turn at a shared GPU."""
        with self.turns(device).timing() if task in TIMED_TASKS else contextlib.nullcontext():
            return getattr(self.forge, task)(box, device, *args)

    def turns(self, device: torch.device):
        """This worker's turns at device (no-ops unless it shares its GPU)."""
        return turns_for(device, self.shares_gpu)

    # ----- memory -------------------------------------------------------------------------------
    def _release(self, key: tuple[str, str]) -> bool:
        backend = self._built.pop(key, None)
        if backend is None:
            return False
        backend.deactivate()
        del backend
        return True

    @staticmethod
    def _free() -> None:
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _note_memory(self, device: torch.device) -> None:
        if device.type == "cuda":
            self.peak_memory_bytes = max(self.peak_memory_bytes, torch.cuda.max_memory_allocated(device))

    def stats(self) -> dict:
        """Counters, cached modules, held builds, peak device memory and this process's peak RSS."""
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        waited = sum(turns_for(d, self.shares_gpu).waited_s for d in {entry[3] for entry in self._modules.values()})
        simulated = sys.modules.get("aitune_ray.testing.sim")   # test doubles' buffers, where this process has any
        return {"loads": self.loads, "baselines": self.baselines, "restores": self.restores, "pid": os.getpid(),
                "simulated_buffer_peak": simulated.LIVE_BUFFERS.peak if simulated is not None else 0,
                "modules": sorted(self._modules),
                "shares_gpu": self.shares_gpu, "turn_wait_s": waited,
                "built": self.built_keys(), "peak_memory_bytes": self.peak_memory_bytes, "peak_rss_bytes": rss}


def confirmed(results: list[BuildResult], out: dict):
    """The Session of a worker's confirm() output; fills each result's remeasured timings (per batch size; the
    passes over the recorded calls, MIX, stay in the session) from it."""
    from aitune_ray.decision.session import Session
    from aitune_ray.measure.timing import MIX

    for key, error in (out.get("errors") or {}).items():
        logger.warning("%s was not timed in the confirm session: %s", key, error)
    for r in results:
        r.remeasured = {int(bs): t for bs, t in (out.get("results") or {}).get(r.key, {}).items() if int(bs) != MIX}
    return Session.from_timings(out)


def as_user_calls(module: torch.nn.Module, backend: Backend) -> torch.nn.Module:
    """backend behind the wrapper a user calls (aitune_ray.Module), on module."""
    from aitune_ray.records.registry import user_wrapper

    wrapper = user_wrapper()(module, name="confirm", patch_forward=False)   # several on one module
    wrapper.use_backend(backend)
    return wrapper


def confirm_session(module, samples, device: torch.device, backends: dict[str, Backend], request: TimingRequest,
                    workdir: Path) -> dict:
    """Eager, the A/A control (a TorchEagerBackend restored like a candidate) and backends (active), each
    called as the user calls it, timed as request says (paired shuffled rounds per recorded batch size, from
    this thread, in its serving context). A callable that raises, or that changes the process's threading
    settings, fails the session: {"failed": why}; else {"eager", "control", "results": key -> timings
    (Timing.to_dict() by batch size), "context": the ServingContext it ran in, as a dict}."""
    from aitune_ray.backend.torch_eager import TorchEagerBackend

    if request.rounds < 1:
        return {"failed": f"the confirm session needs at least one round, got {request.rounds}"}
    control = None
    try:
        control = Backend.from_spec(TorchEagerBackend().spec())
        control.restore(module, {}, {}, device, workdir)
        control.activate()
        calls = {"eager": module, "control": as_user_calls(module, control)}
        calls.update({key: as_user_calls(module, backend) for key, backend in backends.items()})
        session = request.run(calls, samples, device)
    except ThreadsChanged as exc:
        return {"failed": str(exc)}
    except Exception as exc:
        logger.exception("the confirm session failed")
        return {"failed": f"{type(exc).__name__}: {exc}"}
    finally:
        if control is not None:
            control.deactivate()
    return {"eager": session.plain("eager"), "control": session.plain("control"),
            "results": {key: session.plain(key) for key in session.timings if key not in ("eager", "control")},
            "context": session.context.to_dict(), "device": session.device}


def finalist(result: BuildResult) -> dict:
    """What a worker needs to restore a result's backend: key, spec, exported state, artifacts."""
    return {"key": result.key, "spec": result.spec, "state": result.state, "artifacts": result.artifacts}
