"""Run folders: a tuning job's journal, so that a job whose driver was killed resumes where it stopped.

A run folder is data that can be hostile, like a checkpoint: someone else who can write it must not make a
resume run code, read or copy files from elsewhere, or make --fresh delete files that are not the project's.
So (run_files.py, runtime/confined.py):

- manifest.json lists every file the project wrote there with its SHA-256, signed (HMAC-SHA256) with a key only
  this user can read; a folder whose manifest does not verify, or that holds files and no manifest, is refused
  in every mode and nothing in it is touched;
- every file is written atomically (.NAME.part, then a rename; a kill leaves the old file or the new one) and
  listed as under way before it is written, so that only listed names are ever removed;
- every file read back is reached without following a link and checked against its hash (artifacts and logs as
  they are copied into this process's private work folder: a file changed afterwards is not the one used);
- the folder is locked (.aitune-ray.lock, flock) while a run has it open: a second run is refused, and --fresh
  never clears a folder another run holds.

Layout:

    manifest.json                     every file below with its SHA-256, and the manifest's HMAC
    .aitune-ray.lock                  the lock; its holder's pid, host and start time
    run.json                          format, package versions, the job's identity, whether it finished
    <module>/module.json              the module's name, class and a SHA-256 of its weights
    <module>/samples.safetensors      the recorded inputs and eager outputs (tensors)
    <module>/samples.json             their structure (plain JSON: nothing is ever pickled)
    <module>/baseline.json            the eager baseline timings
    <module>/results/<key>.json       one per finished candidate: its job and its result record
    <module>/logs/<key>.log           that candidate's build log (up to 16 MiB)
    <module>/started/<key>.json       one per inline candidate whose build began and has no result yet
    <module>/started/<key>.crash      a build in the driver's own process (inline, not contained): where a
                                      fatal signal (segfault, abort) ended the driver during it, the
                                      faulthandler's report (listed without a hash, read only as text); a resume
                                      then records that build as crashed instead of building it again (a driver
                                      killed from outside, SIGKILL, leaves it empty: the build runs again)
    <module>/artifacts/<key>/<name>   that candidate's artifact files

<module> is the module's name as one plain path component (records/artifacts.py plain_part).

JournalingExecutor wraps another executor (inline or Ray). It stores the samples, the baseline and each
candidate's result (with its artifacts) as soon as they exist; on a resumed run it hands the strategy
the stored samples and baseline, replays the stored results, and gives the wrapped executor only the
jobs that are missing. Finalists are re-measured side by side as usual, replayed or not.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import faulthandler
import hashlib
import json
import logging
import os
import sys
import threading
import weakref
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
from aitune_ray.executors import run_files
from aitune_ray.executors.run_lock import Lock
from aitune_ray.runtime import confined
from aitune_ray.model.structure import BASES, base_name, class_name, is_namedtuple, make, resolve_class

logger = logging.getLogger(__name__)

FORMAT = 2   # 2: a manifest of every file, signed with the user's key (run_files.py)
NOT_RUN = (NotRun.__name__,)   # error types of results that say a job never ran: not journaled


# ----- plain helpers ---------------------------------------------------------------------------------
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


def encode_samples(samples: SampleStore) -> tuple[bytes, dict]:
    """(the tensors as safetensors bytes, the structure as plain JSON data): nothing is ever pickled."""
    from safetensors.torch import save

    tensors: dict[str, torch.Tensor] = {}
    entries = [{"args": _encode(s.args, tensors), "kwargs": _encode(s.kwargs, tensors),
                "outputs": _encode(s.outputs, tensors), "batch_size": s.batch_size} for s in samples]
    return save(tensors), {"calls_seen": samples.calls_seen, "samples": entries}


def decode_samples(tensor_bytes: bytes, data: dict, where: str) -> SampleStore:
    from safetensors.torch import load

    try:
        tensors = load(tensor_bytes)
        return SampleStore([Sample(_decode(e["args"], tensors), _decode(e["kwargs"], tensors),
                                   _decode(e["outputs"], tensors), int(e["batch_size"])) for e in data["samples"]],
                           int(data["calls_seen"]))
    except RunFolderError:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors and a damaged JSON raise several types
        raise RunFolderError(f"the samples in {where} cannot be read ({type(exc).__name__}: {exc}); start over "
                             "with --fresh") from exc


# ----- the folder ------------------------------------------------------------------------------------
class RunFolder:
    """A run folder on disk, locked by this process while open (close() or the object's end releases it).

    open() creates it, or checks that it is the project's (its manifest verifies with this user's key) and that
    it belongs to this job and these packages. mode: "resume" continues what the folder holds (or starts it);
    "fresh" removes the project's files in it first; "new" starts over when the folder holds a finished run,
    and refuses an unfinished one (it may be resumed). A folder that is not provably the project's is refused
    in every mode and nothing in it is touched."""

    def __init__(self, path: Path, identity: dict, root: int, key: bytes):
        self.path, self.identity = Path(path), identity
        self._root, self._key = root, key
        self._lock: Lock | None = None
        self._manifest = run_files.Manifest()
        self._guard = threading.RLock()   # journals of several modules write from their own threads
        self._finalizer = weakref.finalize(self, os.close, root)

    @classmethod
    def open(cls, path: str | Path, identity: dict | None = None, mode: str = "resume") -> "RunFolder":
        if mode not in ("resume", "fresh", "new"):
            raise ConfigError(f"mode must be resume, fresh or new, got {mode!r}")
        path = Path(os.path.expanduser(str(path)))
        identity = {"format": FORMAT, **package_identity(), **(identity or {})}
        try:
            return cls._open(path, identity, mode)
        except OSError as exc:
            raise RunFolderError(f"run folder {path} cannot be written ({exc.strerror or exc}); choose another "
                                 "with --run-dir") from exc

    @classmethod
    def _open(cls, path: Path, identity: dict, mode: str) -> "RunFolder":
        if path.is_symlink():
            raise RunFolderError(f"run folder {path} is a symbolic link; give the folder it points to with "
                                 "--run-dir (the link is left alone)")
        if path.exists() and not path.is_dir():
            raise RunFolderError(f"run folder {path} is a file, not a folder")
        key = run_files.user_key()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
        try:
            root = confined.open_root(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RunFolderError(f"run folder {path} is a symbolic link; give the folder it points to with "
                                     "--run-dir (the link is left alone)") from None
            raise
        folder = cls(path, identity, root, key)
        try:
            folder._check_ours()   # before anything is written into it, the lock file included
            folder._lock = Lock(run_files.LOCK, root, f"run folder {path}")
            folder._check_ours()   # again, now that no other run of the project can change it
            folder._start(mode)
        except BaseException:
            folder.close()
            raise
        return folder

    def close(self) -> None:
        """Release the folder's lock (another run may open it now)."""
        if self._lock is not None:
            self._lock.release()
        self._finalizer()

    # ----- what the folder holds ---------------------------------------------------------------------
    def _check_ours(self) -> None:
        """Read the manifest (verified with this user's key); a folder without one must be empty."""
        manifest = run_files.Manifest.read(self._root, self._key, self.path)
        if manifest is None:
            files, folders = confined.listing(self._root)
            extra = [name for name in files if name not in run_files.RESERVED] + folders
            if extra:
                raise RunFolderError(f"{self.path} is not a run folder of aitune-ray (it holds "
                                     f"{_names(extra)} and no {run_files.MANIFEST}); it is left alone: remove it "
                                     "yourself or choose another --run-dir")
            manifest = run_files.Manifest()
        self._manifest = manifest

    def _start(self, mode: str) -> None:
        if self._manifest.clearing or mode == "fresh":
            self._start_over()
            return
        stored = self.read_json("run.json")
        if stored is None or not self.has_work():
            # Nothing was tuned yet (the job failed before its first baseline or result, or a kill left the
            # folder half made): nothing to resume or to protect, so any mode starts over (a corrected job is
            # not locked out by a failed start).
            self._start_over()
            return
        if mode == "new":
            if not stored.get("complete"):
                raise RunFolderError(f"run folder {self.path} holds an unfinished run of a job: --resume continues "
                                     "it, --fresh starts over")
            self._start_over()
            return
        differ = sorted(k for k in set(self.identity) | set(stored.get("identity", {}))
                        if self.identity.get(k) != stored.get("identity", {}).get(k))
        if differ:
            was = ", ".join(f"{k}={stored.get('identity', {}).get(k)!r}" for k in differ)
            now = ", ".join(f"{k}={self.identity.get(k)!r}" for k in differ)
            raise RunFolderError(f"run folder {self.path} belongs to another run ({was}; this run: {now}); "
                                 "--fresh (or another run folder) starts over")
        logger.info("resuming the run in %s", self.path)

    def _start_over(self) -> None:
        self.clear()
        self.write_json("run.json", {"identity": self.identity, "complete": False})

    def clear(self) -> None:
        """Remove the files the manifest names, and only those. A folder that holds anything else is refused
        before anything is removed. The manifest says 'clearing' first, so a kill midway is finished at the next
        open, in any mode."""
        with self._guard:
            listed = self._manifest.files
            files, folders = confined.listing(self._root)
            ours = set(listed) | set(run_files.RESERVED) | {_part(name) for name in listed}
            foreign = [name for name in files if name not in ours]
            if foreign:
                raise RunFolderError(f"run folder {self.path} holds files aitune-ray did not write "
                                     f"({_names(foreign)}); nothing was removed: move them out, or choose another "
                                     "--run-dir")
            if listed:
                self._manifest.clearing = True
                self._save_manifest()
                for name in sorted(listed, reverse=True):
                    confined.remove(self._root, name)
            for name in sorted(folders, key=lambda f: f.count("/"), reverse=True):
                confined.remove_empty_dir(self._root, name)
            self._manifest = run_files.Manifest()
            self._save_manifest()

    def has_work(self) -> bool:
        """Whether the folder holds anything tuned: an eager baseline or a candidate's result."""
        return any(name.endswith("/baseline.json") or "/results/" in name for name in self.names())

    def names(self) -> list[str]:
        """The files the manifest names as written whole."""
        return [name for name, digest in self._manifest.files.items() if digest is not None]

    def module(self, name: str) -> "ModuleJournal":
        return ModuleJournal(self, artifacts.plain_part(name), name)

    def results_count(self) -> int:
        return sum(1 for name in self.names() if "/results/" in name)

    def mark_complete(self) -> None:
        self.write_json("run.json", {"identity": self.identity, "complete": True})

    # ----- files, through the manifest ---------------------------------------------------------------
    def _save_manifest(self) -> None:
        self._manifest.write(self._root, self._key)

    def _listed(self, name: str, digest: str | None) -> None:
        with self._guard:
            self._manifest.files[name] = digest
            self._save_manifest()

    def write(self, name: str, blocks) -> None:
        """Write name (bytes, or an iterable of bytes): listed as under way first, then with its SHA-256."""
        self._listed(name, None)
        try:
            digest = confined.write(self._root, name, [blocks] if isinstance(blocks, bytes) else blocks)
        except confined.OutsideError as exc:   # a link or a file planted where a folder of the run is
            raise self._changed(name, f"cannot be written ({exc})") from None
        self._listed(name, digest)

    def write_json(self, name: str, data: Any) -> None:
        self.write(name, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())

    def copy_in(self, name: str, source: Path) -> None:
        """Write a copy of the local file source (followed: it is this run's own) as name."""
        with open(source, "rb") as src:
            self.write(name, iter(lambda: src.read(confined.CHUNK), b""))

    def remove(self, name: str) -> None:
        """Remove name, a file the manifest lists (listed as under way while it goes)."""
        if name not in self._manifest.files:
            return
        self._listed(name, None)
        confined.remove(self._root, name)
        with self._guard:
            self._manifest.files.pop(name, None)
            self._save_manifest()

    def _changed(self, name: str, why: str) -> RunFolderError:
        return RunFolderError(f"run folder {self.path}: {name} {why}; nothing of it is used: --fresh starts over "
                              "(it removes only the files aitune-ray wrote)")

    def read(self, name: str) -> bytes | None:
        """name's bytes, checked against the manifest; None where the manifest does not list it as written."""
        digest = self._manifest.files.get(name)
        if digest is None:
            return None
        try:
            data = confined.read(self._root, name)
        except (OSError, confined.OutsideError) as exc:
            raise self._changed(name, f"cannot be read ({exc})") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise self._changed(name, "was changed after aitune-ray wrote it (its SHA-256 differs from the "
                                      "manifest's)")
        return data

    def read_json(self, name: str) -> Any:
        data = self.read(name)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise self._changed(name, f"is not JSON ({exc})") from exc

    def copy_out(self, name: str, target: Path) -> None:
        """Copy name to target (a private folder of this process), its bytes checked against the manifest as
        they are copied; a copy that does not match is removed and refused."""
        digest = self._manifest.files.get(name)
        if digest is None:
            raise self._changed(name, "is not a file the manifest lists as written")
        try:
            blocks = confined.chunks(confined.open_file(self._root, name))
        except (OSError, confined.OutsideError) as exc:
            raise self._changed(name, f"cannot be read ({exc})") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.part")
        found = hashlib.sha256()
        try:
            with open(temp, "wb") as out:
                for block in blocks:
                    found.update(block)
                    out.write(block)
            if found.hexdigest() != digest:
                raise self._changed(name, "was changed after aitune-ray wrote it (its SHA-256 differs from the "
                                          "manifest's)")
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)

    def open_report(self, name: str):
        """A file to write name into directly (a crash report the faulthandler writes): listed, with no hash."""
        self._listed(name, None)
        *folders, base = confined.parts(name)
        parent = confined.open_dir(self._root, folders, create=True)
        try:
            fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=parent)
        finally:
            os.close(parent)
        return os.fdopen(fd, "w")

    def read_report(self, name: str, limit: int = 1 << 20) -> str:
        """The text of a report open_report listed ('' where there is none): text only, never trusted as more."""
        if name not in self._manifest.files:
            return ""
        try:
            return confined.read(self._root, name)[-limit:].decode("utf-8", "replace")
        except (OSError, confined.OutsideError):
            return ""


def _part(name: str) -> str:
    *folders, base = name.split("/")
    return "/".join([*folders, confined.part_name(base)])


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


class ModuleJournal:
    """One module's part of a run folder: files under <plain name>/, written and read through the folder."""

    def __init__(self, run: RunFolder, prefix: str, name: str):
        self.run, self.prefix, self.name = run, prefix, name
        self.folder = run.path / prefix   # for messages

    def _at(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts))

    def check_module(self, module: torch.nn.Module) -> None:
        """Record the module's fingerprint, or refuse when the folder holds another module's results."""
        fingerprint = {"name": self.name, **module_fingerprint(module)}
        stored = self.run.read_json(self._at("module.json"))
        if stored is None:
            self.run.write_json(self._at("module.json"), fingerprint)
        elif stored != fingerprint:
            what = "class" if stored.get("class") != fingerprint["class"] else "weights"
            raise RunFolderError(f"run folder {self.run.path}: module {self.name!r} has other {what} "
                                 f"than the one this run folder was made for ({stored.get('class')}, weights "
                                 f"{str(stored.get('weights_sha256'))[:12]}; now {fingerprint['class']}, "
                                 f"{fingerprint['weights_sha256'][:12]}); --fresh starts over")

    def samples(self, recorded: SampleStore) -> SampleStore:
        """The stored samples (the first run's), or recorded, stored now."""
        data = self.run.read_json(self._at("samples.json"))
        tensors = self.run.read(self._at("samples.safetensors")) if data is not None else None
        if data is None or tensors is None:
            tensor_bytes, structure = encode_samples(recorded)
            self.run.write(self._at("samples.safetensors"), tensor_bytes)
            self.run.write_json(self._at("samples.json"), structure)
            return recorded
        stored = decode_samples(tensors, data, str(self.folder))
        logger.info("[%s] using the %d samples the run folder recorded", self.name, len(stored))
        return stored

    def baseline(self) -> dict[int, Timing] | None:
        data = self.run.read_json(self._at("baseline.json"))
        if data is None:
            return None
        return {int(bs): Timing.from_dict(t) for bs, t in data.items()}

    def store_baseline(self, baseline: dict[int, Timing]) -> None:
        self.run.write_json(self._at("baseline.json"), {str(bs): t.to_dict() for bs, t in baseline.items()})

    def _result_name(self, key: str) -> str:
        return self._at("results", f"{artifacts.safe_name(key)}.json")

    def _started_name(self, key: str, suffix: str = ".json") -> str:
        return self._at("started", f"{artifacts.safe_name(key)}{suffix}")

    def _artifact_name(self, key: str, name: str) -> str:
        return self._at("artifacts", artifacts.safe_name(key), artifacts.safe_name(name))

    def _log_name(self, key: str) -> str:
        return self._at("logs", f"{artifacts.safe_name(key)}.log")

    @contextlib.contextmanager
    def building(self, job: CandidateJob, in_process: bool) -> Iterator[None]:
        """Around job's build: it is recorded as started first; in the driver's own process (in_process), a
        fatal signal during it has the faulthandler write its report beside that record, for a resume."""
        self.run.write_json(self._started_name(job.key), {"job": job.to_dict(), "in_process": in_process,
                                                          "pid": os.getpid()})
        if not in_process:
            yield
            return
        crash = self._started_name(job.key, ".crash")
        was_enabled = faulthandler.is_enabled()
        with self.run.open_report(crash) as report:
            faulthandler.enable(file=report)
            try:
                yield
            finally:
                faulthandler.disable()
                if was_enabled:   # as it was, on the process's own stderr (sys.stderr may be a capture)
                    with contextlib.suppress(Exception):
                        faulthandler.enable(file=sys.__stderr__)
        self.run.remove(crash)

    def _crashed_driver(self, job: CandidateJob, workdir: Path) -> BuildResult | None:
        """A crashed result for job when an earlier driver built it in its own process and a fatal signal
        ended that driver during the build (its faulthandler report is there); else None (build it)."""
        fatal = self.run.read_report(self._started_name(job.key, ".crash")).strip()
        if not fatal:
            return None
        marker = self.run.read_json(self._started_name(job.key))
        if marker is None or marker.get("job") != json.loads(json.dumps(job.to_dict())):
            return None
        report = artifacts.write_atomic(Path(workdir) / "logs" / f"{artifacts.safe_name(job.key)}.crash",
                                        fatal.encode())
        hint = log_hint(str(report)) or fatal.splitlines()[0]
        logger.warning("[%s] %s ended the driver process during its build (%s): recorded as crashed, not built "
                       "again (--fresh builds it again)", self.name, job.key, hint)
        return BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=CRASHED,
                           error_type="DriverCrashed",
                           error=f"its build ended the driver process: {hint} (inline executor, not contained; "
                                 f"report: {report})", log_path=str(report))

    def stored(self, job: CandidateJob, workdir: Path) -> BuildResult | None:
        """job's stored result, its artifacts and log copied (and checked) into workdir; None when it has none,
        or when an artifact of it that is code lies outside the folder (a URL), where nothing can check it."""
        record = self.run.read_json(self._result_name(job.key))
        if record is None:
            return self._crashed_driver(job, workdir)
        if record.get("job") != json.loads(json.dumps(job.to_dict())):
            raise RunFolderError(f"run folder {self.run.path}: candidate {job.key} of {self.name} was run "
                                 "with other settings (tolerance, measurement or config) than this run asks "
                                 "for; --fresh starts over")
        result = BuildResult.from_dict(record["result"])
        result.spec = job.spec   # this run's own: a stored record never chooses which class is built
        for name, value in list(result.artifacts.items()):
            expected = self._artifact_name(job.key, name)
            if isinstance(value, dict) and value.get("file") == expected:
                target = Path(workdir) / "artifacts" / artifacts.safe_name(job.key) / artifacts.safe_name(name)
                self.run.copy_out(expected, target)
                result.artifacts[name] = str(target)
            elif isinstance(value, str) and artifacts.is_url(value):
                if _is_code(job, name):
                    logger.warning("[%s] %s: its artifact %s is code kept at %s, outside the run folder, where "
                                   "nothing checks it: built again", self.name, job.key, name, value)
                    return None
            else:
                raise RunFolderError(f"run folder {self.run.path}: the result of {job.key} names artifact {name!r} "
                                     f"at {str(value)[:120]!r}, not its place in the folder ({expected}); it is "
                                     "not used: --fresh starts over")
        result.log_path = ""
        if record.get("log") == self._log_name(job.key):
            target = Path(workdir) / "logs" / f"{artifacts.safe_name(job.key)}.log"
            self.run.copy_out(record["log"], target)
            result.log_path = str(target)
        return result

    def store(self, job: CandidateJob, result: BuildResult) -> None:
        """Write result (and its artifact files and log) now; the record goes last, so it means 'all of it'."""
        record = result.to_dict()
        for name, value in result.artifacts.items():
            target = self._artifact_name(job.key, name)
            if isinstance(value, (bytes, bytearray, memoryview)):
                self.run.write(target, bytes(value))
            elif isinstance(value, (str, Path)) and not artifacts.is_url(str(value)):
                self.run.copy_in(target, artifacts.local_path(str(value)))
            else:
                continue   # a URL stays a URL
            record["artifacts"][name] = {"file": target}
        entry = {"job": job.to_dict(), "result": record}
        log = Path(result.log_path) if result.log_path else None
        if log is not None and log.is_file() and log.stat().st_size <= LOG_LIMIT:
            self.run.copy_in(self._log_name(job.key), log)
            entry["log"] = self._log_name(job.key)
        self.run.write_json(self._result_name(job.key), entry)
        self.run.remove(self._started_name(job.key))
        self.run.remove(self._started_name(job.key, ".crash"))


LOG_LIMIT = 16 << 20   # a build's log is copied into the run folder up to this size


def _is_code(job: CandidateJob, name: str) -> bool:
    """Whether job's backend may open the artifact called name (as the checkpoint side's classify() rules: a JIT
    backend is rebuilt from its config and opens none; an AOT backend's artifacts are code or unknown). A
    backend that cannot be made from the spec here counts as one that opens it."""
    from aitune_ray.backend import Backend

    try:
        return not Backend.from_spec(job.spec).is_jit
    except Exception:  # noqa: BLE001 - whatever the spec is, not knowing means code
        return True


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
                except (OSError, confined.OutsideError, RunFolderError) as exc:   # the run goes on; only its
                    # resumability is lost
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

    def __init__(self, inner: Executor, folder: RunFolder, owns_folder: bool = False):
        self.inner, self.folder, self._owns_folder = inner, folder, owns_folder
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
        if self._owns_folder:   # opened by journaled(): its lock goes with this journal
            self.folder.close()

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

    def materialize(self, context: TuneContext, result: BuildResult):
        return self.inner.materialize(context, result)

    def discard(self, context: TuneContext) -> None:
        self.inner.discard(context)

    def stop_all(self, reason: str) -> None:
        self.inner.stop_all(reason)


def journaled(executor: Executor, run_dir: "str | Path | RunFolder") -> JournalingExecutor:
    if isinstance(run_dir, RunFolder):
        return JournalingExecutor(executor, run_dir)
    return JournalingExecutor(executor, RunFolder.open(run_dir), owns_folder=True)
