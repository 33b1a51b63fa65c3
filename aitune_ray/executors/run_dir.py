"""Run folders: a tuning job's journal, so that a job whose driver was killed resumes where it stopped.

Layout (every file is written atomically: a temporary file in the same folder, then a rename; a kill
leaves the old file or the new one, never half of one):

    run.json                          format, package versions, the job's identity, whether it finished
    <module>/module.json              the module's name, class and a SHA-256 of its weights
    <module>/samples.safetensors      the recorded inputs and eager outputs (tensors)
    <module>/samples.json             their structure (plain JSON: nothing is ever pickled)
    <module>/baseline.json            the eager baseline timings
    <module>/results/<key>.json       one per finished candidate: its job and its result record
    <module>/started/<key>.json       one per inline candidate whose build began and has no result yet
    <module>/started/<key>.crash      a build in the driver's own process (inline, not contained): where a
                                      fatal signal (segfault, abort) ended the driver during it, the
                                      faulthandler's report; a resume then records that build as crashed
                                      instead of building it again (a driver killed from outside, SIGKILL,
                                      leaves it empty: the build runs again)
    <module>/artifacts/<key>/<name>   that candidate's artifact files

JournalingExecutor wraps another executor (inline or Ray). It stores the samples, the baseline and each
candidate's result (with its artifacts) as soon as they exist; on a resumed run it hands the strategy
the stored samples and baseline, replays the stored results, and gives the wrapped executor only the
jobs that are missing. Finalists are re-measured side by side as usual, replayed or not.
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import torch

import aitune_ray.records.artifacts as artifacts
import aitune_ray.version as version
from aitune_ray.worker.seam import Executor, RunHandle, TuneContext
from aitune_ray.errors import ConfigError, RunFolderError
from aitune_ray.records.failures import NotRun, log_hint
from aitune_ray.measure.timing import Timing
from aitune_ray.records.results import CANCELLED, CRASHED, BuildResult, CandidateJob
from aitune_ray.model.samples import PLAIN_TYPES, Sample, SampleStore, tensors_of
from aitune_ray.model.structure import BASES, base_name, class_name, is_namedtuple, make, resolve_class

logger = logging.getLogger(__name__)

FORMAT = 1
NOT_RUN = (NotRun.__name__,)   # error types of results that say a job never ran: not journaled


# ----- plain helpers ---------------------------------------------------------------------------------
def _write_json(path: Path, data: Any) -> None:
    artifacts.write_atomic(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunFolderError(f"{path} cannot be read ({exc}); the run folder is damaged: start over with "
                             "--fresh (or remove it)") from exc


def _folder_name(name: str) -> str:
    """A module name as one plain folder name (names that had to change get a short hash)."""
    plain = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "module"
    if plain != name:
        plain += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return plain


def package_identity() -> dict:
    """What a run folder's results depend on besides the job: aitune-ray's and torch's versions."""
    return {"aitune_ray": version.__version__, "torch": torch.__version__}


def module_fingerprint(module: torch.nn.Module) -> dict:
    """The module's class and a SHA-256 over its state_dict (names, dtypes, shapes, bytes)."""
    digest = hashlib.sha256()
    for name, value in module.state_dict().items():
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu").contiguous()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            if tensor.numel():
                digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    cls = type(module)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "weights_sha256": digest.hexdigest()}


# ----- samples as safetensors + JSON -----------------------------------------------------------------
def _encode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = obj.detach().to("cpu").contiguous().clone()
        return {"tensor": name}
    if isinstance(obj, (tuple, list, dict)):   # its class by name (model.structure: resolved, never imported)
        own = {} if type(obj) in (tuple, list, dict) else {"class": class_name(type(obj))}
        if is_namedtuple(obj):
            return {"namedtuple": type(obj).__name__, "fields": list(obj._fields),
                    "items": [_encode(v, tensors) for v in obj], **own}
        if isinstance(obj, dict):
            return {"dict": [[k, _encode(v, tensors)] for k, v in obj.items()], **own}
        return {base_name(obj): [_encode(v, tensors) for v in obj], **own}
    if isinstance(obj, PLAIN_TYPES):
        return {"value": obj}
    raise RunFolderError(f"a recorded value of type {type(obj).__name__} cannot be stored in a run folder")


def _decode(data: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if not isinstance(data, dict) or len(data) not in (1, 2, 3, 4) or ("class" in data and len(data) not in (2, 4)):
        raise RunFolderError(f"samples.json holds an unexpected entry: {str(data)[:80]}")
    if "tensor" in data:
        return tensors[data["tensor"]]
    if "namedtuple" in data:
        cls = resolve_class(str(data.get("class", "")), "tuple")
        if cls is None or getattr(cls, "_fields", None) != tuple(data["fields"]):
            cls = collections.namedtuple(data["namedtuple"], data["fields"])
        return cls(*(_decode(v, tensors) for v in data["items"]))
    for kind in ("tuple", "list", "dict"):
        if kind in data:
            cls = resolve_class(str(data.get("class", kind)), kind) or BASES[kind]
            if kind == "dict":
                return make(cls, [_decode(v, tensors) for _, v in data["dict"]], [k for k, _ in data["dict"]])
            return make(cls, [_decode(v, tensors) for v in data[kind]])
    if "value" in data:
        return data["value"]
    raise RunFolderError(f"samples.json holds an unexpected entry: {str(data)[:80]}")


def save_samples(samples: SampleStore, folder: Path) -> None:
    from safetensors.torch import save

    tensors: dict[str, torch.Tensor] = {}
    entries = [{"args": _encode(s.args, tensors), "kwargs": _encode(s.kwargs, tensors),
                "outputs": _encode(s.outputs, tensors), "batch_size": s.batch_size} for s in samples]
    artifacts.write_atomic(folder / "samples.safetensors", save(tensors))
    _write_json(folder / "samples.json", {"calls_seen": samples.calls_seen, "samples": entries})


def load_samples(folder: Path) -> SampleStore | None:
    from safetensors.torch import load_file

    if not (folder / "samples.json").is_file():
        return None
    data = _read_json(folder / "samples.json")
    try:
        tensors = load_file(str(folder / "samples.safetensors"), device="cpu")
        store = SampleStore([Sample(_decode(e["args"], tensors), _decode(e["kwargs"], tensors),
                                    _decode(e["outputs"], tensors), int(e["batch_size"])) for e in data["samples"]],
                            int(data["calls_seen"]))
    except RunFolderError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors and a damaged JSON raise several types
        raise RunFolderError(f"the samples in {folder} cannot be read ({type(exc).__name__}: {exc}); start over "
                             "with --fresh (or remove the run folder)") from exc
    return store


# ----- the folder ------------------------------------------------------------------------------------
class RunFolder:
    """A run folder on disk. open() creates it or checks that it belongs to this job and these packages.

    mode: "resume" continues what the folder holds (or starts it); "fresh" removes it first; "new" starts
    over when the folder holds a finished run, and refuses an unfinished one (it may be resumed)."""

    def __init__(self, path: Path, identity: dict):
        self.path, self.identity = Path(path), identity

    @classmethod
    def open(cls, path: str | Path, identity: dict | None = None, mode: str = "resume") -> "RunFolder":
        if mode not in ("resume", "fresh", "new"):
            raise ConfigError(f"mode must be resume, fresh or new, got {mode!r}")
        path = Path(path)
        identity = {"format": FORMAT, **package_identity(), **(identity or {})}
        try:
            return cls._open(path, identity, mode)
        except OSError as exc:
            raise RunFolderError(f"run folder {path} cannot be written ({exc.strerror or exc}); choose another "
                                 "with --run-dir") from exc

    @classmethod
    def _open(cls, path: Path, identity: dict, mode: str) -> "RunFolder":
        meta = path / "run.json"
        if path.exists() and not path.is_dir():
            raise RunFolderError(f"run folder {path} is a file, not a folder")
        _remove_set_aside(path)
        stored = _read_json(meta) if meta.is_file() else None
        if stored is not None and not has_work(path):
            # Nothing was tuned yet (the job failed before its first baseline or result): nothing to resume
            # or to protect, so any mode starts over (a corrected job is not locked out by a failed start).
            mode = "fresh"
        if mode == "new" and stored is not None:
            if not stored.get("complete"):
                raise RunFolderError(f"run folder {path} holds an unfinished run of a job: --resume continues "
                                     "it, --fresh starts over")
            mode = "fresh"
        if path.exists() and stored is None and any(path.iterdir()):
            raise RunFolderError(f"{path} is not a run folder (it has no run.json); it is left alone")
        if mode == "fresh" and stored is not None:
            clear(path)
            stored = None
        if stored is not None:
            differ = sorted(k for k in set(identity) | set(stored.get("identity", {}))
                            if identity.get(k) != stored.get("identity", {}).get(k))
            if differ:
                was = ", ".join(f"{k}={stored.get('identity', {}).get(k)!r}" for k in differ)
                now = ", ".join(f"{k}={identity.get(k)!r}" for k in differ)
                raise RunFolderError(f"run folder {path} belongs to another run ({was}; this run: {now}); "
                                     "--fresh (or another run folder) starts over")
            logger.info("resuming the run in %s", path)
        else:
            _create(path, {"identity": identity, "complete": False})
        return cls(path, identity)

    def module(self, name: str) -> "ModuleJournal":
        return ModuleJournal(self.path / _folder_name(name), name)

    def results_count(self) -> int:
        return sum(1 for _ in self.path.glob("*/results/*.json"))

    def mark_complete(self) -> None:
        _write_json(self.path / "run.json", {"identity": self.identity, "complete": True})


class ModuleJournal:
    """One module's part of a run folder."""

    def __init__(self, folder: Path, name: str):
        self.folder, self.name = folder, name

    def check_module(self, module: torch.nn.Module) -> None:
        """Record the module's fingerprint, or refuse when the folder holds another module's results."""
        fingerprint = {"name": self.name, **module_fingerprint(module)}
        path = self.folder / "module.json"
        if path.is_file():
            stored = _read_json(path)
            if stored != fingerprint:
                what = "class" if stored.get("class") != fingerprint["class"] else "weights"
                raise RunFolderError(f"run folder {self.folder.parent}: module {self.name!r} has other {what} "
                                     f"than the one this run folder was made for ({stored.get('class')}, weights "
                                     f"{str(stored.get('weights_sha256'))[:12]}; now {fingerprint['class']}, "
                                     f"{fingerprint['weights_sha256'][:12]}); --fresh starts over")
        else:
            _write_json(path, fingerprint)

    def samples(self, recorded: SampleStore) -> SampleStore:
        """The stored samples (the first run's), or recorded, stored now."""
        stored = load_samples(self.folder)
        if stored is None:
            save_samples(recorded, self.folder)
            return recorded
        logger.info("[%s] using the %d samples the run folder recorded", self.name, len(stored))
        return stored

    def baseline(self) -> dict[int, Timing] | None:
        path = self.folder / "baseline.json"
        if not path.is_file():
            return None
        return {int(bs): Timing.from_dict(t) for bs, t in _read_json(path).items()}

    def store_baseline(self, baseline: dict[int, Timing]) -> None:
        _write_json(self.folder / "baseline.json", {str(bs): t.to_dict() for bs, t in baseline.items()})

    def _result_path(self, key: str) -> Path:
        return self.folder / "results" / f"{artifacts.safe_name(key)}.json"

    def _started_path(self, key: str) -> Path:
        return self.folder / "started" / f"{artifacts.safe_name(key)}.json"

    @contextlib.contextmanager
    def building(self, job: CandidateJob, in_process: bool) -> Iterator[None]:
        """Around job's build: it is recorded as started first; in the driver's own process (in_process), a
        fatal signal during it has the faulthandler write its report beside that record, for a resume."""
        marker = self._started_path(job.key)
        _write_json(marker, {"job": job.to_dict(), "in_process": in_process, "pid": os.getpid()})
        if not in_process:
            yield
            return
        crash = marker.with_suffix(".crash")
        was_enabled = faulthandler.is_enabled()
        with open(crash, "w") as report:
            faulthandler.enable(file=report)
            try:
                yield
            finally:
                faulthandler.disable()
                if was_enabled:   # as it was, on the process's own stderr (sys.stderr may be a capture)
                    with contextlib.suppress(Exception):
                        faulthandler.enable(file=sys.__stderr__)
        crash.unlink(missing_ok=True)

    def _crashed_driver(self, job: CandidateJob) -> BuildResult | None:
        """A crashed result for job when an earlier driver built it in its own process and a fatal signal
        ended that driver during the build (its faulthandler report is there); else None (build it)."""
        marker, crash = self._started_path(job.key), self._started_path(job.key).with_suffix(".crash")
        try:
            fatal = crash.read_text(errors="replace").strip()
        except OSError:
            return None
        if not fatal or not marker.is_file() or _read_json(marker).get("job") != json.loads(json.dumps(job.to_dict())):
            return None
        hint = log_hint(str(crash)) or fatal.splitlines()[0]
        logger.warning("[%s] %s ended the driver process during its build (%s): recorded as crashed, not built "
                       "again (--fresh builds it again)", self.name, job.key, hint)
        return BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=CRASHED,
                           error_type="DriverCrashed",
                           error=f"its build ended the driver process: {hint} (inline executor, not contained; "
                                 f"report: {crash})", log_path=str(crash))

    def stored(self, job: CandidateJob, workdir: Path) -> BuildResult | None:
        """job's stored result, its artifacts copied into workdir; None when it has none."""
        path = self._result_path(job.key)
        if not path.is_file():
            return self._crashed_driver(job)
        record = _read_json(path)
        if record.get("job") != json.loads(json.dumps(job.to_dict())):
            raise RunFolderError(f"run folder {self.folder.parent}: candidate {job.key} of {self.name} was run "
                                 "with other settings (tolerance, measurement or config) than this run asks "
                                 "for; --fresh starts over")
        result = BuildResult.from_dict(record["result"])
        result.spec = job.spec   # this run's own: a stored record never chooses which class is built
        for name, value in list(result.artifacts.items()):
            if isinstance(value, dict) and "file" in value:   # a copy in this folder; the live copy in workdir
                source = self.folder / value["file"]
                target = Path(workdir) / "artifacts" / job.key / artifacts.safe_name(name)
                target.parent.mkdir(parents=True, exist_ok=True)
                _copy_atomic(source, target)
                result.artifacts[name] = str(target)
        return result

    def store(self, job: CandidateJob, result: BuildResult) -> None:
        """Write result (and its artifact files) now; the record goes last, so it means 'all of it'."""
        record = result.to_dict()
        where = self.folder / "artifacts" / artifacts.safe_name(job.key)
        shutil.rmtree(where, ignore_errors=True)
        for name, value in result.artifacts.items():
            target = where / artifacts.safe_name(name)
            if isinstance(value, (bytes, bytearray, memoryview)):
                artifacts.write_atomic(target, bytes(value))
            elif isinstance(value, (str, Path)) and not artifacts.is_url(str(value)):
                target.parent.mkdir(parents=True, exist_ok=True)
                _copy_atomic(artifacts.local_path(str(value)), target)
            else:
                continue   # a URL stays a URL
            record["artifacts"][name] = {"file": str(target.relative_to(self.folder))}
        _write_json(self._result_path(job.key), {"job": job.to_dict(), "result": record})
        self._started_path(job.key).unlink(missing_ok=True)
        self._started_path(job.key).with_suffix(".crash").unlink(missing_ok=True)


def has_work(path: Path) -> bool:
    """Whether a run folder holds anything tuned: an eager baseline or a candidate's result."""
    return any(path.glob("*/baseline.json")) or any(path.glob("*/results/*.json"))


SET_ASIDE = ".removing-"


def clear(path: Path) -> None:
    """Remove a run folder so that a kill at any moment leaves either the whole folder or none at path: it is
    renamed aside first (one atomic step), then deleted; what a kill leaves aside goes at the next open."""
    aside = path.with_name(f".{path.name}{SET_ASIDE}{os.getpid()}-{os.urandom(4).hex()}")
    os.rename(path, aside)
    shutil.rmtree(aside)


def _remove_set_aside(path: Path) -> None:
    """Remove what an earlier clear() renamed aside and did not get to delete (its process was killed)."""
    for aside in path.parent.glob(f".{glob.escape(path.name)}{SET_ASIDE}*"):
        shutil.rmtree(aside, ignore_errors=True)


def _create(path: Path, meta: dict) -> None:
    """The folder with its run.json, made beside it and renamed into place: a kill leaves it whole or absent.
    An empty folder already at path (made by the user) is replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}{SET_ASIDE}{os.getpid()}-{os.urandom(4).hex()}")
    staging.mkdir()
    try:
        _write_json(staging / "run.json", meta)
        if path.is_dir():
            path.rmdir()   # empty (checked by the caller)
        os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _copy_atomic(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.part")
    try:
        os.link(source, tmp)   # same file system: no copy at all
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


# ----- the executor wrapper --------------------------------------------------------------------------
class _JournalHandle(RunHandle):
    def __init__(self, journal: ModuleJournal, replayed: list[BuildResult], inner: RunHandle | None,
                 jobs: dict[str, CandidateJob]):
        self._journal, self._replayed, self._inner, self._jobs = journal, replayed, inner, jobs
        self._cancelled = False

    def __iter__(self) -> Iterator[BuildResult]:
        for result in self._replayed:
            if self._cancelled:
                return
            yield result
        if self._inner is None:
            return
        for result in self._inner:
            if result.status != CANCELLED and result.error_type not in NOT_RUN and result.key in self._jobs:
                try:
                    self._journal.store(self._jobs[result.key], result)
                except OSError as exc:   # the run goes on; only its resumability is lost
                    logger.error("[%s] the result of %s could not be written to the run folder: %s",
                                 self._journal.name, result.key, exc)
            yield result

    def cancel(self) -> None:
        self._cancelled = True
        if self._inner is not None:
            self._inner.cancel()


class JournalingExecutor(Executor):
    """Wraps an executor: journals into a RunFolder and, on a resumed run, runs only what is missing.

    Every member of the Executor interface is passed on to the inner executor explicitly, optional ones
    included (release, emit, progress, concurrent_modules, gpu_kind, confirm): a wrapper that fell back on the base
    class's defaults would silently change what the inner executor does (a release never sent keeps every
    build alive until the decision). tests/test_run_dir_seam.py checks that each one is defined here."""

    # The journal watches the inner executor's builds itself (it sets inner.watch_build): no one watches
    # builds through this wrapper.
    watch_build = None

    def __init__(self, inner: Executor, folder: RunFolder):
        self.inner, self.folder = inner, folder
        self._journals: dict[str, ModuleJournal] = {}
        # Several journals may wrap one executor (a job of several models, one run folder each): each watches
        # the builds of its own modules and hands the others to the watcher it found (see _watch_build).
        self._outer_watch = inner.watch_build
        inner.watch_build = self._watch_build

    def _watch_build(self, context: TuneContext, job: CandidateJob, in_process: bool):
        if context.name in self._journals:
            return self._journal(context).building(job, in_process)
        if self._outer_watch is not None:
            return self._outer_watch(context, job, in_process)
        return contextlib.nullcontext()

    @property
    def progress(self):
        return self.inner.progress

    @progress.setter
    def progress(self, sink) -> None:
        self.inner.progress = sink

    @property
    def concurrent_modules(self) -> bool:
        return self.inner.concurrent_modules

    @property
    def gpu_kind(self) -> str | None:
        return self.inner.gpu_kind

    def emit(self, context: TuneContext, event: str, **kwargs) -> dict:
        return self.inner.emit(context, event, **kwargs)

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.detach()
        self.inner.close()

    def detach(self) -> None:
        """Stop listening to the wrapped executor's builds (it may be used again without this journal)."""
        if self.inner.watch_build == self._watch_build:
            self.inner.watch_build = self._outer_watch

    def resolve_device(self, device) -> torch.device:
        return self.inner.resolve_device(device)

    def _journal(self, context: TuneContext) -> ModuleJournal:
        """The module's journal; the first time, also check the module and swap in the stored samples."""
        journal = self._journals.get(context.name)
        if journal is None:
            journal = self.folder.module(context.name)
            journal.check_module(context.module)
            samples = journal.samples(context.samples)
            if samples is not context.samples:
                found = tensors_of([(s.args, s.kwargs) for s in context.samples])
                context.samples = samples.to(found[0].device if found else "cpu")
            self._journals[context.name] = journal
        return journal

    def baseline(self, context: TuneContext) -> dict[int, Timing]:
        journal = self._journal(context)
        stored = journal.baseline()
        if stored is not None:
            logger.info("[%s] eager baseline from the run folder", context.name)
            return stored
        baseline = self.inner.baseline(context)
        journal.store_baseline(baseline)
        return baseline

    def _start(self, context: TuneContext, jobs: list[CandidateJob], early: bool) -> RunHandle:
        journal = self._journal(context)
        replayed, missing = [], []
        for job in jobs:
            result = journal.stored(job, context.workdir)
            (missing.append(job) if result is None else replayed.append(result))
        if replayed:
            logger.info("[%s] %d of %d candidates from the run folder; %d to run", context.name, len(replayed),
                        len(jobs), len(missing))
        inner = None
        if missing:
            # Early submission lets a parallel executor build while eager is timed; with a stored
            # baseline there is no such timing, and the early path would hold an actor for it.
            early = early and journal.baseline() is None
            inner = (self.inner.submit_early if early else self.inner.submit)(context, missing)
        return _JournalHandle(journal, replayed, inner, {job.key: job for job in missing})

    def submit(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        return self._start(context, jobs, early=False)

    def submit_early(self, context: TuneContext, jobs: list[CandidateJob]) -> RunHandle:
        return self._start(context, jobs, early=True)

    def confirm(self, context: TuneContext, results: list[BuildResult]):
        return self.inner.confirm(context, results)

    def release(self, context: TuneContext, result: BuildResult) -> None:
        self.inner.release(context, result)

    def release(self, context: TuneContext, result: BuildResult) -> None:
        self.inner.release(context, result)

    def materialize(self, context: TuneContext, result: BuildResult):
        return self.inner.materialize(context, result)

    def discard(self, context: TuneContext) -> None:
        self.inner.discard(context)

    def stop_all(self, reason: str) -> None:
        self.inner.stop_all(reason)


def journaled(executor: Executor, run_dir: "str | Path | RunFolder") -> JournalingExecutor:
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder.open(run_dir)
    return JournalingExecutor(executor, folder)
