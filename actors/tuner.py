"""TunerActor: one per GPU. Builds, checks and profiles candidates, times eager, re-measures finalists,
and runs the kernel forge's tasks (provider benchmarks, generators; see actors.forge).

The class is plain Python; aitune_ray.cluster.pool turns it into a Ray actor pinned to its resources.
Everything it receives and returns is plain data: job and result dicts, artifact bytes, and the module
and samples, which arrive once per module as object references and are cached here.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
import torch

from actors.forge import ForgeWork
from aitune_ray.backend.backend import Backend
from aitune_ray.candidate import run_candidate
from aitune_ray.cluster import artifacts
from aitune_ray.measure.timing import MeasureConfig, profile_samples, profile_side_by_side
from aitune_ray.results import ERROR, CandidateJob

logger = logging.getLogger(__name__)


def _node_gpus() -> float:
    """GPUs on this actor's node, from Ray's view of the cluster (0 when unknown)."""
    try:
        node_id = ray.get_runtime_context().get_node_id()
        return next(n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["NodeID"] == node_id)
    except Exception:  # outside Ray, or the node list is unavailable
        return 0.0


def expose_main_globals(module: torch.nn.Module) -> list[str]:
    """Make the globals of classes defined in the driver's __main__ visible in this worker's __main__.

    Such classes arrive pickled by value, each function with a globals dict of its own named "__main__".
    When Dynamo inlines one of their methods (a submodule's forward, called from a compiled parent's), it
    resolves that method's globals by importing "__main__", which here is Ray's worker script, and fails
    ("module '__main__' has no attribute 'F'"). Names the worker's __main__ already has are left alone.
    Returns the names added."""
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
        logger.info("classes from the driver's __main__: their globals %s are now visible in this worker's "
                    "__main__ (for Dynamo)", sorted(added))
    return added


def _plain_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "module"


class TunerActor:
    """slot: this actor's place in the pool. log_path: this actor's own log file (on its node).
    limit_bytes / artifact_dir: how artifacts travel back (see aitune_ray.cluster.artifacts)."""

    def __init__(self, slot: int, log_path: str, limit_bytes: int, artifact_dir: str | None = None):
        self.slot = slot
        self.log_path = log_path
        self.limit_bytes = limit_bytes
        self.artifact_dir = artifact_dir
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", buffering=1)
        handler = logging.StreamHandler(self._log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        faulthandler.enable(file=self._log, all_threads=True)  # a segfault leaves its traceback here
        # Beside the logs, in a folder the driver removes when it closes (on its own node; on the others
        # cleanup() does it for actors still alive then).
        self.workdir = Path(tempfile.mkdtemp(prefix=f"work-actor{slot}-", dir=Path(log_path).parent))
        self._modules: dict[str, tuple[tuple, Any, Any, torch.device]] = {}
        self._built: dict[tuple[str, str], Backend] = {}
        self.loads = 0
        self.baselines = 0
        self._identity = self._describe()
        self._forge = ForgeWork(self._identity)
        logger.info("actor %d started: pid %d, %s", slot, os.getpid(), self._identity)
        if torch.cuda.is_available():
            self._warm_up()
        self._identity["ready_at"] = time.time()   # wall clock: up and warmed (benchmarks read it)

    def _warm_up(self) -> None:
        """Pay the one-time costs (CUDA context, Inductor's compile workers, Triton) before the first task,
        while the driver is still recording and timing eager, and share the node's CPUs between the actors'
        compile workers instead of each starting one per core."""
        started = time.perf_counter()
        import torch._inductor.config as inductor_config

        per_node = max(1, int(_node_gpus() or torch.cuda.device_count()))
        share = max(2, (os.cpu_count() or 2) // per_node)
        inductor_config.compile_threads = share
        # Ray starts workers with OMP_NUM_THREADS=1 (the actor's CPU reservation); a GPU actor is the only
        # user of its share of the node's cores, and host-side work (weight quantization, compiles) needs them.
        torch.set_num_threads(share)
        try:
            compiled = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2.0 + 1.0)
            compiled(torch.randn(64, 64, device="cuda"))
            torch.cuda.synchronize()
            if importlib.util.find_spec("torchao") is not None:
                importlib.import_module("torchao.quantization")
        except Exception as exc:  # a warm-up failure is only a lost head start
            logger.warning("warm-up failed: %s", exc)
        logger.info("warm-up took %.1f s (compile threads %d)", time.perf_counter() - started,
                    inductor_config.compile_threads)

    # ----- identity -----------------------------------------------------------------------------
    def _describe(self) -> dict:
        host = socket.gethostname()
        try:
            ip = ray.util.get_node_ip_address()
            node_id = ray.get_runtime_context().get_node_id()
        except Exception:  # outside Ray (tests calling the class directly)
            ip, node_id = "", ""
        gpu_ids = [str(i) for i in ray.get_gpu_ids()] if ray.is_initialized() else []
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            uuid = str(getattr(props, "uuid", ""))
            gpu = f"{props.name} #{','.join(gpu_ids) or '0'}" + (f" ({uuid})" if uuid else "")
        elif gpu_ids:
            gpu = f"cpu (Ray GPU {','.join(gpu_ids)})"   # a logical GPU without CUDA: still its own identity
        else:
            gpu = f"cpu (actor {self.slot})"
        where = ", ".join(p for p in (ip, f"node {node_id[:8]}" if node_id else "") if p)
        return {"node": f"{host} ({where})" if where else host, "node_id": node_id, "gpu": gpu, "gpu_ids": gpu_ids,
                "cuda": torch.cuda.is_available(), "pid": os.getpid(), "log_path": self.log_path,
                "slot": self.slot}

    def identity(self) -> dict:
        return dict(self._identity)

    def cleanup(self) -> None:
        """Remove this actor's work folder (called before the pool shuts it down)."""
        self._modules.clear()
        self._built.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def stats(self) -> dict:
        return {"loads": self.loads, "baselines": self.baselines, "pid": os.getpid(), "slot": self.slot,
                "modules": sorted(self._modules), "built": sorted(k for _, k in self._built)}

    @staticmethod
    def device_for(intent: str) -> torch.device:
        """The driver says cpu or cuda; this worker uses its own visible GPU when it has CUDA."""
        if intent == "cuda" and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    # ----- module cache -------------------------------------------------------------------------
    def _module(self, name: str, box: list, intent: str):
        """The module and samples of name on this worker's device, fetched once per module."""
        token = tuple(ref.hex() if hasattr(ref, "hex") else id(ref) for ref in box) + (intent,)
        cached = self._modules.get(name)
        if cached is not None and cached[0] == token:
            return cached[1], cached[2], cached[3]
        self.discard(name)
        module, samples = ray.get(list(box)) if isinstance(box[0], ray.ObjectRef) else box
        expose_main_globals(module)
        device = self.device_for(intent)
        if intent == "cuda" and device.type == "cpu":
            logger.warning("the driver asked for cuda but this worker has no CUDA device: using the CPU")
        module = module.to(device).eval()
        samples = samples.to(device)
        self.loads += 1
        self._modules[name] = (token, module, samples, device)
        logger.info("loaded module %s (%d samples) onto %s", name, len(samples), device)
        return module, samples, device

    def discard(self, name: str) -> None:
        """Forget the module and everything built for it here (and the kernel forge's samples)."""
        self._modules.pop(name, None)
        self._forge.clear()
        for key in [k for k in self._built if k[0] == name]:
            del self._built[key]
        shutil.rmtree(self.workdir / _plain_name(name), ignore_errors=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # ----- work ---------------------------------------------------------------------------------
    def baseline(self, name: str, box: list, intent: str, measure: dict) -> dict[int, dict]:
        module, samples, device = self._module(name, box, intent)
        logger.info("timing eager %s on %s", name, device)
        self.baselines += 1
        timings = profile_samples(module, samples, device, MeasureConfig.from_dict(measure))
        return {bs: t.to_dict() for bs, t in timings.items()}

    def run(self, name: str, box: list, intent: str, job: dict) -> dict:
        """Build, check and profile one candidate. Returns {"result": BuildResult dict, "refs": {name: ref}}
        where refs holds artifacts too large to travel inside the result (no artifact_dir configured)."""
        module, samples, device = self._module(name, box, intent)
        candidate = CandidateJob(**job)
        logger.info("candidate %s of %s on %s", candidate.key, name, device)
        result, backend = run_candidate(candidate, module, samples, device, self.workdir / _plain_name(name),
                                        self.log_path)
        result.node, result.gpu = self._identity["node"], self._identity["gpu"]
        refs: dict[str, Any] = {}
        if backend is not None:
            backend.deactivate()
            self._built[(name, candidate.key)] = backend
            try:
                result.artifacts, large = artifacts.pack(
                    result.artifacts, limit_bytes=self.limit_bytes, artifact_dir=self.artifact_dir,
                    prefix=f"{_plain_name(name)}/{candidate.key}")
                refs = {n: ray.put(p.read_bytes()) for n, p in large.items()}
            except Exception as exc:
                logger.exception("artifact transfer of %s failed", candidate.key)
                result.status, result.error_type = ERROR, type(exc).__name__
                result.error = f"artifact transfer failed: {type(exc).__name__}: {exc}"
                result.artifacts = {}
                self._built.pop((name, candidate.key), None)
        logger.info("candidate %s: %s %s", candidate.key, result.status, result.error)
        return {"result": result.to_dict(), "refs": refs}

    def _restore(self, name: str, module, device: torch.device, finalist: dict) -> Backend:
        backend = self._built.get((name, finalist["key"]))
        if backend is not None:
            backend.activate()
            return backend
        where = self.workdir / _plain_name(name) / "restored" / finalist["key"]
        files = artifacts.fetch(finalist.get("artifacts") or {}, where)
        backend = Backend.from_spec(finalist["spec"])
        backend.restore(module, finalist.get("state") or {}, files, device, where)
        backend.activate()
        self._built[(name, finalist["key"])] = backend
        return backend

    def remeasure(self, name: str, box: list, intent: str, finalists: list[dict], rounds: int) -> dict:
        """Time eager and every finalist in turn (A B A B ...) at each recorded batch size, here.

        finalists: {"key", "spec", "state", "artifacts"} each; a finalist built on this actor is reused,
        any other is restored from its spec, state and artifacts."""
        module, samples, device = self._module(name, box, intent)
        backends: dict[str, Backend] = {}
        errors: dict[str, str] = {}
        for finalist in finalists:
            try:
                backends[finalist["key"]] = self._restore(name, module, device, finalist)
            except Exception as exc:
                logger.exception("cannot restore %s for re-measurement", finalist["key"])
                errors[finalist["key"]] = f"{type(exc).__name__}: {exc}"
        calls: dict[str, Any] = {"eager": module}
        calls.update({key: backend.infer for key, backend in backends.items()})
        try:
            timed = profile_side_by_side(calls, samples, device, rounds)
        finally:
            for backend in backends.values():
                backend.deactivate()
        eager = {bs: t.to_dict() for bs, t in timed.pop("eager").items()}
        timed = {key: {bs: t.to_dict() for bs, t in per.items()} for key, per in timed.items()}
        logger.info("re-measured %s and %d finalist(s) on %s", name, len(backends), self._identity["gpu"])
        return {"eager": eager, "results": timed, "errors": errors, "node": self._identity["node"],
                "gpu": self._identity["gpu"]}

    # ----- kernel forge (box: [ObjectRef] of one function's CPU FunctionData) -----------------------
    def forge_benchmark(self, box: list, intent: str, function: str, provider: dict, tolerance: float | None,
                        measure: dict, source: str) -> dict:
        """benchmark_provider on this actor's device: a ProviderBenchmark dict naming this GPU."""
        return self._forge.benchmark(box, self.device_for(intent), function, provider, tolerance, measure, source)

    def forge_generate(self, box: list, intent: str, function: str, generator: dict,
                       timeout: float | None = None) -> dict:
        """run_generator here: a GenerationOutcome dict (the driver enforces the generation timeout)."""
        return self._forge.generate(box, self.device_for(intent), function, generator, timeout)

    def forge_original(self, box: list, intent: str, function: str, measure: dict) -> dict:
        """The original function timed here, on the path the candidates were timed on."""
        return self._forge.original(box, self.device_for(intent), function, measure)

    def forge_interleaved(self, box: list, intent: str, function: str, providers: list[dict], rounds: int) -> dict:
        """The original and providers timed in turn (A B A B ...) here."""
        return self._forge.interleaved(box, self.device_for(intent), function, providers, rounds)
