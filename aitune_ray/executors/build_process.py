"""One candidate's build, check and profile in a child process of the inline executor, so that a build that
segfaults, aborts or hangs costs that candidate only (PyTorch Inductor benchmarks in a subprocess likewise).

What crosses, through files in a private temporary folder (no Ray):
- to the child: the module and its recorded samples (cloudpickle when it is installed, so that a class
  defined in the user's script travels by value; else pickle), the job (plain data), the device, the
  module's work folder, where the build writes its artifacts, and the clock this process measures with
  when it is not the real one (aitune_ray.measure.timing.use_clock): the child's screening and profile
  read the same clock as this process's eager timing and confirm session;
- back: the result record (plain data) and the build's exception (failures.pack_exception).
The child writes its result and exits; the parent waits at most timeout_s, then kills it. The child runs in
a process group of its own, killed whole when it ends (runtime/process_group.py): a compiler or any other
helper the build started does not outlive it. A child that ends
without a result crashed; one killed at its timeout timed out (failures.lost_process says which, for
this and for a Ray actor alike). Its stderr is the candidate's log (faulthandler prints a crash's stack
there), kept beside the module's artifacts.

Run as ``python -m aitune_ray.executors.build_process FOLDER`` by run_in_child only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from aitune_ray.runtime import process_group, tempdirs
from aitune_ray.measure import timing
from aitune_ray.records.failures import lost_process, outcome, pack_exception, revive_exception
from aitune_ray.records.results import BuildResult, CandidateJob

logger = logging.getLogger(__name__)


def _pickler(module: torch.nn.Module):
    """cloudpickle where it is installed (a module with classes of the driver's __main__ needs it: plain pickle
    cannot send them); else pickle."""
    try:
        import cloudpickle

        return cloudpickle
    except ImportError:
        pass
    if any(type(m).__module__ == "__main__" for m in module.modules()):
        raise ImportError("the module has classes defined in the script that runs (__main__): sending them to a "
                          "build process needs cloudpickle (pip install cloudpickle), or build in this process "
                          "(contain=False)")
    return pickle


def run_in_child(name: str, module: torch.nn.Module, samples, device: torch.device, job: CandidateJob,
                 workdir: Path, timeout_s: float, where: dict) -> BuildResult:
    """job built, checked and profiled in a fresh child process; its result, or one that says how the child
    failed (crashed, timed out). where: {"node", "gpu"} stamped on a failed result."""
    folder = tempdirs.make("build")
    log_path = Path(workdir) / "logs" / f"{job.key}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        try:
            with open(folder / "job.pkl", "wb") as out:
                _pickler(module).dump({"name": name, "module": module, "samples": samples, "device": str(device),
                                       "job": job.to_dict(), "workdir": str(workdir), "log_path": str(log_path),
                                       "clock": timing.clock_in_use()},
                                      out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - whatever the pickler met names the object
            failure = outcome("sending the module and its samples to a build process", exc=exc)
            return _failed(job, failure.status, failure.error, failure.error_type, 0.0, device, where, "")
        env = dict(os.environ)
        # The child imports what this process can: the project, and the user's modules named by the pickle.
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
        with open(log_path, "ab") as log:
            proc = process_group.start([sys.executable, "-m", __name__, str(folder)], env=env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:   # the child's process group ends with it, whatever it started (a compiler) included
            code = process_group.wait(proc, timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            process_group.end(proc)
            code, timed_out = proc.returncode, True
        except BaseException:   # Ctrl-C: the child and what it started go too
            process_group.end(proc)
            raise
        seconds = time.monotonic() - started
        result_file = folder / "result.pkl"
        if not timed_out and result_file.is_file():
            with open(result_file, "rb") as src:
                out = pickle.load(src)
            result = BuildResult.from_dict(out["result"])
            result.exception = revive_exception(out.get("exception"))
            result.log_path = str(log_path)
            return result
        failure = lost_process(code, timed_out, timeout_s, str(log_path))
        return _failed(job, failure.status, f"{job.backend_name}: {failure.error}", failure.error_type, seconds,
                       device, where, str(log_path))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _failed(job: CandidateJob, status: str, error: str, error_type: str, seconds: float, device, where: dict,
            log_path: str) -> BuildResult:
    return BuildResult(key=job.key, backend=job.backend_name, spec=job.spec, status=status, error=error,
                       error_type=error_type, build_s=seconds, total_s=seconds, device=str(device),
                       node=where.get("node", ""), gpu=where.get("gpu", ""), log_path=log_path)


# ----- the child ------------------------------------------------------------------------------------------
def _child(folder: Path) -> None:
    import faulthandler

    from aitune_ray.measure.request import set_process_kind
    from aitune_ray.worker.core import Worker

    set_process_kind("child")   # the sessions timed here say so
    faulthandler.enable()   # a crash's Python stack goes to stderr: the candidate's log
    with open(folder / "job.pkl", "rb") as src:
        data = pickle.load(src)
    device = torch.device(data["device"])
    worker = Worker(folder / "worker", log_path=data["log_path"])
    worker.load(data["name"], 0, lambda: (data["module"], data["samples"]), device, workdir=Path(data["workdir"]))
    clock = data.get("clock")
    with timing.use_clock(clock) if clock is not None else contextlib.nullcontext():
        result = worker.run(data["name"], CandidateJob(**data["job"]))
    out = {"result": result.to_dict(), "exception": pack_exception(result.exception)}
    with open(folder / "result.part", "wb") as dst:
        pickle.dump(out, dst, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(folder / "result.part", folder / "result.pkl")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        _child(Path(sys.argv[1]))
    except BaseException:  # noqa: BLE001 - the parent reads the traceback in the log
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # no interpreter teardown: the result is written
