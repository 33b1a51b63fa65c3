"""What the tune command checks before any work: each mistake a one-line ConfigError (the command prints it and
exits 2) within seconds, never after the recording and the builds.

In order, after the job file itself (its keys, its factories' imports: load_jobs):

1. paths: the checkpoint and the report are files, not existing folders, in folders this user can write; the
   run folder is a folder (check_paths);
2. the GPU kind: a job that names one runs on Ray, where some node has GPUs of that kind (check_gpu_kind; on
   a cluster reached by address, Ray answers when the executor connects, still before any recording);
3. the extras: every backend the job names finds its libraries where its builds run (check_extras).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from aitune_ray.errors import ConfigError, DeviceError

#: Libraries a model factory commonly imports, by import name: the extra of this project that brings them.
MODEL_EXTRAS = {"transformers": "transformers", "diffusers": "zoo", "timm": "zoo", "torchvision": "zoo",
                "onnx": "onnx", "onnxruntime": "onnx", "torchao": "torchao", "ray": "ray", "matplotlib": "report",
                "rich": "report"}


def install_hint(extra: str) -> str:
    """How to install an extra, from a clone of this repository (as the README sets up)."""
    return f'pip install -e ".[{extra}]"'


def missing_library_text(name: str) -> str | None:
    """For a module that failed to import: '<top package>, which is not installed; pip install ...' where an
    extra of this project brings it, else None."""
    top = (name or "").partition(".")[0]
    extra = MODEL_EXTRAS.get(top)
    return f"{top}, which is not installed; {install_hint(extra)}" if extra else None


# ----- 1. paths --------------------------------------------------------------------------------------
def run_folder_path(job, run_dir: str | None, several: bool) -> Path:
    """The model's run folder: --run-dir (in a job of several models, its subfolder of the model's name), else
    the checkpoint path with .run appended."""
    from aitune_ray.records.artifacts import plain_part

    if run_dir:
        base = Path(os.path.expanduser(run_dir))
        return base / plain_part(job.name) if several else base
    return Path(f"{job.output}.run")


def check_paths(job, run_dir: str | None = None, resume: bool = False, several: bool = False,
                stem: str = "model") -> None:
    """The checkpoint and the report are files (not existing folders) in folders that take a new file (made
    here when missing); the run folder, where it exists, is a folder. stem names the example file
    (the job file's). A mistake is a ConfigError naming the
    option to change, and where an earlier run's results could be kept, how."""
    run = run_folder_path(job, run_dir, several)
    for key, path, suffix in (("output", job.output, ".ait"), ("report", job.report, ".md")):
        if not path:
            continue
        if Path(path).is_dir():
            example = Path(path) / f"{job.name or stem}{suffix}"
            keep = ""
            if key == "output" and not run_dir and not resume and Path(f"{path}.run").is_dir():
                keep = f"; to keep the earlier run's results add --run-dir {path}.run --resume"
            raise ConfigError(f"{key}: {path} is a folder; name a file, e.g. --{key} {example}{keep}")
        _check_writable(key, Path(path).resolve().parent)
    if run.exists() and not run.is_dir():
        raise ConfigError(f"run folder: {run} is a file, not a folder; choose another with --run-dir")
    if not run.exists():
        _check_writable("run-dir", _existing_parent(run.resolve()), make=False)


def _existing_parent(path: Path) -> Path:
    while not path.parent.exists() and path.parent != path:
        path = path.parent
    return path.parent


def _check_writable(key: str, folder: Path, make: bool = True) -> None:
    try:
        if make:
            folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".aitune-ray-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{key}: cannot write into {folder} ({exc.strerror or exc}); choose another path with "
                          f"--{key}") from exc


# ----- 2. the GPU kind -------------------------------------------------------------------------------
def check_gpu_kind(job) -> None:
    """A job that names a GPU kind runs on Ray, and there some node has GPUs of that kind. Checked here: the
    executor (a kind needs Ray), a Ray this process has joined (its nodes), and a local Ray to be started (this
    machine's GPUs, named as Ray names them). A cluster reached by address is checked when the executor
    connects (aitune_ray.cluster.kinds.capacity), before any recording."""
    kind = job.executor.gpu_kind
    if not kind:
        return
    from aitune_ray.executors.choice import RAY, choose_executor

    address = job.executor.address or os.environ.get("RAY_ADDRESS")
    choice = choose_executor(job.executor.type, job.executor.address, job.device)
    if choice.kind != RAY:
        raise DeviceError(f"executor.gpu_kind: {kind!r} needs the ray executor, and this job runs {choice.kind} "
                          f"({choice.reason}); give --address of a Ray cluster with {kind} nodes, or leave "
                          "gpu_kind out")
    from aitune_ray.cluster import kinds

    kinds.check_before_start(kind, address)


# ----- 3. the extras ---------------------------------------------------------------------------------
def builds_here(job) -> bool:
    """Whether the job's builds run on this machine (inline, or a Ray started here), so that its libraries
    are the ones to check. On a cluster, `aitune-ray doctor --address` checks each node."""
    from aitune_ray.executors.choice import INLINE, choose_executor

    choice = choose_executor(job.executor.type, job.executor.address, job.device)
    return choice.kind == INLINE or not (job.executor.address or os.environ.get("RAY_ADDRESS"))


def check_extras(job) -> None:
    """Every backend the job names finds the libraries it declares (Backend.libraries) where it builds; a
    missing one names the extra that installs it."""
    if not job.backends or not builds_here(job):
        return
    import importlib.util

    from aitune_ray.executors.doctor import LIBRARIES, backend_libraries

    for index, backend in enumerate(job.make_backends()):
        cls = type(backend)
        for library in backend_libraries(cls):
            try:
                found = importlib.util.find_spec(library.partition(".")[0]) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                extra = LIBRARIES.get(library, ((), ""))[1]
                hint = f"; {install_hint(extra)}" if extra else ""
                raise ConfigError(f"backends[{index}]: {cls.__name__} needs {library}, which is not installed "
                                  f"here{hint}")
