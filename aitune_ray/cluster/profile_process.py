"""The kernel plan's CUDA profile in a child process of a Ray driver, so that the driver keeps no CUPTI.

A CUDA trace leaves CUPTI attached to its process unless Kineto tears it down, and in a process that is
also Ray's driver that teardown hangs the process at exit (benchmarks/exit_check.py). A Ray driver that
profiled for a kernel plan in its own process therefore kept CUPTI, and each later kernel launch in it
cost more: 25-63% per call of a host-bound encoder at batch 8 on an H200 (benchmarks/host_modes.py). That
cost fell on the post-deploy check timed there and on the user's own calls after tune(). Here the trace
runs in a child process that exits as soon as it has written its result, and the driver's launches stay
as they were.

What crosses, through two files in a temporary folder:
- to the child: the profiler's class and function names, the function, the module and the recorded inputs,
  pickled with cloudpickle (a class defined in the user's script travels by value). A CUDA tensor travels
  as a CUDA IPC handle (torch.multiprocessing's reduction): the weights are shared, not copied;
- back: the profile's rows without their module objects (the driver puts its own back, by name), and each
  function's distinct samples on the CPU with the device of each tensor, which the driver moves them back to.

The child starts before it has a job (ProfileChild, which PlanRun starts with the batch, so that its start
overlaps the driver's eager baseline) and gets ready; it reads "go" on its standard input, then the job from
its folder. Run as ``python -m aitune_ray.cluster.profile_process FOLDER DEVICE`` by ProfileChild only.
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
import weakref
from typing import Any, Callable, Sequence

import torch
from torch import nn

from aitune_ray.runtime import process_group, tempdirs
from aitune_ray.runtime.device import module_device
from aitune_ray.errors import AITuneRayError
from aitune_ray.records.failures import short
from aitune_ray.kernel_forge.function_samples import FunctionData
from aitune_ray.kernel_forge.profiler import PROFILE_COLUMNS, iter_calls
from aitune_ray.model.samples import map_structure, tensors_of

logger = logging.getLogger(__name__)

PROFILE_TIMEOUT_S = 900.0   # the child's whole life: start, imports, warm-up calls and the trace


class ProfileProcessError(AITuneRayError):
    """The child process could not profile (it could not start, load the job, trace, or it timed out)."""


def profile_in_child(profiler, function: Callable, data: Sequence | None, module: nn.Module,
                     warmup_iterations: int, timeout_s: float = PROFILE_TIMEOUT_S) -> tuple[Any, dict[str, FunctionData]]:
    """profiler.profile(function, data, module=module, warmup_iterations=...) run in a fresh child process
    (ProfileChild.profile; see there)."""
    child = ProfileChild(str(module_device(module)))
    try:
        return child.profile(profiler, function, data, module, warmup_iterations, timeout_s)
    finally:
        child.close()


class ProfileChild:
    """One child process that makes one profile. It starts at once and gets ready while the caller does
    other work (Python, torch, the profiler's imports, a CUDA context on device and one throw-away trace);
    profile() then hands it the job and waits. close() ends it, used or not. While it gets ready, its work on
    the GPU is a handful of tiny kernels (microseconds of GPU time) beside whatever the driver times then."""

    def __init__(self, device: str = "cpu"):
        self.folder = str(tempdirs.make("profile"))
        self._err_path = os.path.join(self.folder, "stderr.txt")
        env = dict(os.environ)
        # The child imports what this process can: the project, and the user's modules named by the pickle.
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
        self.spawned = time.time()
        try:
            with open(self._err_path, "wb") as err:
                self.proc: subprocess.Popen | None = process_group.start(
                    [sys.executable, "-m", __name__, self.folder, device], env=env, stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, stderr=err)
            self.error = ""
        except OSError as exc:
            self.proc, self.error = None, f"the profiling child process could not start: {exc}"
        # Ended and its folder removed also when its owner is dropped without close(), or at exit.
        self._finalizer = weakref.finalize(self, _end, self.proc, self.folder)

    def profile(self, profiler, function: Callable, data: Sequence | None, module: nn.Module,
                warmup_iterations: int, timeout_s: float = PROFILE_TIMEOUT_S) -> tuple[Any, dict[str, FunctionData]]:
        """profiler.profile(function, data, module=module, warmup_iterations=...) in the child.

        Returns what profile() returns: the rows (a DataFrame whose module column holds this process's
        submodules) and each function's samples, on their devices here. Raises ProfileProcessError when the
        child failed; nothing of the child's stays in this process."""
        if self.proc is None:
            raise ProfileProcessError(self.error or "the profiling child process was closed")
        started = time.monotonic()
        job_path, result_path = os.path.join(self.folder, "job.pkl"), os.path.join(self.folder, "result.pkl")
        calls = None if data is None else [(args, kwargs) for args, kwargs in iter_calls(data)]
        job = {"profiler": type(profiler), "function_names": profiler.function_names, "function": function,
               "module": module, "data": calls, "warmup_iterations": warmup_iterations}
        try:
            with open(job_path, "wb") as out:
                _SharingPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(job)
        except Exception as exc:  # noqa: BLE001 - whatever the pickler met names the object
            raise ProfileProcessError(f"the module or its inputs cannot be sent to a child process: "
                                      f"{type(exc).__name__}: {exc}") from exc
        del job, calls
        go_at = time.time()
        try:
            self._go(timeout_s)
            with open(result_path, "rb") as src:
                result = pickle.load(src)
        finally:
            if torch.cuda.is_available():
                torch.cuda.ipc_collect()   # what the child held through IPC handles can be reused here again
        frame, function_data = _restored(result, module)
        logger.info("profiled in a child process: %.1f s from the job to its result; the child was ready %.1f s "
                    "after its start, the job came %.1f s after it, and its trace took %.1f s (this process keeps no "
                    "CUDA profiler attached)", time.monotonic() - started, result["ready_at"] - self.spawned,
                    go_at - self.spawned, result["profile_s"])
        return frame, function_data

    def _go(self, timeout_s: float) -> None:
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        except OSError:
            pass   # it has ended already: its code and words say why
        try:
            code = process_group.wait(self.proc, timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise ProfileProcessError(f"the profiling child process gave no result within {timeout_s:g} s") from exc
        if code != 0 or not os.path.exists(os.path.join(self.folder, "result.pkl")):
            tail = " | ".join(self._stderr().strip().splitlines()[-12:])
            raise ProfileProcessError(f"the profiling child process ended with code {code}: "
                                      f"{short(tail, 1500) if tail else 'no output'}")
        if self._stderr().strip():
            logger.debug("profiling child process said: %s", self._stderr().strip()[-4000:])

    def _stderr(self) -> str:
        try:
            with open(self._err_path, errors="replace") as src:
                return src.read()
        except OSError:
            return ""

    def close(self) -> None:
        """End the child (killed if it still runs) and remove its folder."""
        self.proc = None
        self._finalizer()


def _end(proc: subprocess.Popen | None, folder: str) -> None:
    if proc is not None and proc.returncode is None:
        process_group.end(proc)   # the child and whatever it started
    if proc is not None and proc.stdin is not None and not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    shutil.rmtree(folder, ignore_errors=True)


def _restored(result: dict, module: nn.Module) -> tuple[Any, dict[str, FunctionData]]:
    import pandas as pd

    modules = dict(module.named_modules())
    rows = [{**row, "module": modules.get(row["module_name"])} for row in result["rows"]]
    frame = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    function_data: dict[str, FunctionData] = {}
    for name, samples in result["function_data"].items():
        function_data[name] = []
        for count, sample, devices in samples:
            where = iter(devices)
            function_data[name].append((count, map_structure(sample, lambda t: t.to(next(where)))))
    return frame, function_data


class _SharingPickler:
    """cloudpickle, with each CUDA tensor reduced to a CUDA IPC handle (torch.multiprocessing's reduction)."""

    def __new__(cls, file, protocol):
        from ray import cloudpickle
        from torch.multiprocessing.reductions import reduce_tensor

        class Pickler(cloudpickle.CloudPickler):
            def reducer_override(self, obj):
                if isinstance(obj, torch.Tensor) and obj.is_cuda:
                    return reduce_tensor(obj)
                return super().reducer_override(obj)

        return Pickler(file, protocol=protocol)


# ----- the child ------------------------------------------------------------------------------------------

def _first_kernels(device: torch.device) -> None:
    """The libraries' handles and a few common kernels, which a fresh process otherwise loads in its first calls
    (the profile's warm-up passes then have less to do)."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(2, 4, 64, 64, device=device, dtype=dtype)
        torch.nn.functional.scaled_dot_product_attention(x, x, x)
        torch.nn.functional.gelu(torch.nn.functional.layer_norm(x @ x, (64,)))
        torch.softmax(x, dim=-1)
    torch.cuda.synchronize(device)


def _child(folder: str, device: str) -> None:
    # Get ready while the driver works: the imports, a CUDA context and the profiler's first session.
    from ray import cloudpickle  # noqa: F401 - what unpickles a class sent by value

    from aitune_ray.kernel_forge.profiler import ModuleFunctionKernelProfiler  # noqa: F401
    from aitune_ray.kernel_forge.profiler import prime_cuda_profiler

    import pandas  # noqa: F401 - the profile's rows are a DataFrame

    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        with torch.cuda.device(torch.device(device)), torch.no_grad():
            prime_cuda_profiler(teardown=False)
            _first_kernels(torch.device(device))
    ready_at = time.time()
    if not sys.stdin.readline().strip():
        return   # closed unused
    with open(os.path.join(folder, "job.pkl"), "rb") as src:
        job = pickle.load(src)
    profiler = job["profiler"](function_names=job["function_names"])
    started = time.monotonic()
    # Kineto's teardown of CUPTI is not needed: this process ends right after the trace.
    frame, function_data = profiler.profile(job["function"], job["data"], module=job["module"],
                                            warmup_iterations=job["warmup_iterations"], teardown_cupti=False)
    profile_s = time.monotonic() - started
    rows = [{k: v for k, v in row.items() if k != "module"} for row in frame.to_dict("records")]
    plain = {name: [(count, map_structure(sample, lambda t: t.cpu()),
                     [str(t.device) for t in tensors_of(sample)]) for count, sample in samples]
             for name, samples in function_data.items()}
    result_path = os.path.join(folder, "result.pkl")
    with open(result_path + ".part", "wb") as out:
        pickle.dump({"rows": rows, "function_data": plain, "ready_at": ready_at, "profile_s": profile_s}, out,
                    protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(result_path + ".part", result_path)
    # Give the shared tensors back before leaving, so that the driver's memory is free to reuse at once.
    del job, profiler, frame, function_data
    if torch.cuda.is_available():
        torch.cuda.synchronize()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        _child(sys.argv[1], sys.argv[2])
    except BaseException:  # noqa: BLE001 - the driver reads the traceback from stderr
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.flush()
    sys.stdout.flush()
    # Straight out: no interpreter finalization, no CUPTI teardown, no exit-time hooks of imported libraries.
    os._exit(0)
