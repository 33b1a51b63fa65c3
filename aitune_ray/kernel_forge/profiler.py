"""ModuleFunctionKernelProfiler: which (module, torch.nn.functional call) spends the time.

While profiling, a TorchFunctionMode sees every functional call made in this thread; each call made
inside the module runs in a torch.profiler.record_function range of its own, and forward pre/post
hooks on every submodule say which module is running. Afterwards each profiler event is attributed
to the nearest enclosing call range: on CUDA the kernels its ops launched (kernel time), on CPU the
ops' own CPU time. The mode also keeps each function's distinct inputs (exact shapes, dtypes,
strides and non-tensor values) with how many calls had them.

A CUDA trace is made with TEARDOWN_CUPTI=1 (unless the caller set it): without it, Kineto leaves CUPTI
attached to the process after the trace, and every later kernel launch costs more (pytorch issue
144455). Timing done after profiling, in the same process, would then hold that cost against whatever
was measured second. A process that runs Ray's driver is the exception (profile(teardown_cupti=False),
which the Ray runner asks for): there Kineto's teardown makes the process hang at exit, after its work
(docs/measurement.md, on CUPTI). So the Ray runner makes a CUDA trace in a child process
(aitune_ray.cluster.profile_process), and in the driver only when that child fails; such a trace is noted
(aitune_ray.measure.conditions), and the post-deploy checks timed later in that process say so.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import itertools
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile, record_function

from aitune_ray.measure.conditions import mark_cupti_attached
from aitune_ray.kernel_forge.function_samples import FunctionData, keep_sample, sample_key, tensor_bytes
from aitune_ray.model.samples import tensors_of

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

RANGE_PREFIX = "aitune_ray.functional#"
PROFILE_COLUMNS = ("module_name", "module", "function_name", "op", "kernel", "kernel_us")
SUMMARY_COLUMNS = ("function_name", "calls", "num_distinct_samples", "num_modules", "time_spent_us",
                   "time_spent_pct", "tensor_size_MB")
_FUNCTIONAL_MODULES = {"torch.nn.functional", "torch", "torch._C._nn"}
_cuda_primed = False


def functional_names() -> dict[Callable, str]:
    """Public torch.nn.functional functions by object (a name that matches the object's own wins)."""
    table: dict[Callable, str] = {}
    for name, fn in sorted(vars(F).items()):
        if name.startswith("_") or not (inspect.isfunction(fn) or inspect.isbuiltin(fn)):
            continue
        if getattr(fn, "__module__", None) not in _FUNCTIONAL_MODULES:
            continue
        try:
            if fn not in table or name == getattr(fn, "__name__", None):
                table[fn] = name
        except TypeError:
            continue
    return table


def iter_calls(data: Any) -> Iterable[tuple[tuple, dict]]:
    """(args, kwargs) of each item: recorded Samples (a SampleStore), (args, kwargs) pairs, a dict of
    keywords or a single positional input."""
    for item in data:
        if hasattr(item, "args") and hasattr(item, "kwargs"):
            yield tuple(item.args), dict(item.kwargs)
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (tuple, list)) \
                and isinstance(item[1], dict):
            yield tuple(item[0]), dict(item[1])
        elif isinstance(item, dict):
            yield (), dict(item)
        else:
            yield (item,), {}


def _run(function: Callable, data: Sequence | None) -> None:
    if data is None:
        function()
        return
    for args, kwargs in iter_calls(data):
        function(*args, **kwargs)


def uses_cuda(module: nn.Module, data: Sequence | None) -> bool:
    """Whether a profile of module over data traces CUDA: CUDA is up and the module or the first input is on it."""
    if not torch.cuda.is_available():
        return False
    tensors = list(itertools.chain(module.parameters(), module.buffers()))
    if data is not None:
        for args, kwargs in iter_calls(data):
            tensors.extend(tensors_of((args, kwargs)))
            break
    return any(t.device.type == "cuda" for t in tensors)


def prime_cuda_profiler(teardown: bool = True) -> None:
    """Some profiler stacks drop kernels of a process's first session: run one and throw it away."""
    global _cuda_primed
    if not _cuda_primed:
        with _cupti_released(teardown), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            torch.zeros(1, device="cuda").relu_()
            torch.cuda.synchronize()
        # Kineto finalizes CUPTI at the next CUDA API call after a trace, and a trace that starts before
        # that waits for it: make one now.
        torch.cuda.synchronize()
        _cuda_primed = True


@contextlib.contextmanager
def _cupti_released(teardown: bool = True, cuda: bool = True) -> Iterator[None]:
    """TEARDOWN_CUPTI=1 while the profiler runs and stops (Kineto reads it then), unless already set or
    teardown is False. A CUDA trace (cuda) that leaves CUPTI attached is noted (measure.conditions)."""
    if not teardown or "TEARDOWN_CUPTI" in os.environ:   # the caller's choice (torch sets "0" for CUDA graphs)
        stays = cuda and (not teardown or os.environ.get("TEARDOWN_CUPTI") != "1")
        yield
        if stays:
            mark_cupti_attached()
        return
    os.environ["TEARDOWN_CUPTI"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TEARDOWN_CUPTI", None)


class _Recorder(TorchFunctionMode):
    """Opens a profiler range per functional call made inside the module; keeps distinct samples."""

    def __init__(self, profiler: "ModuleFunctionKernelProfiler"):
        super().__init__()
        self.p = profiler

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            name = self.p._names.get(func)
        except TypeError:
            name = None
        stack = getattr(self.p._local, "stack", None)
        if name is None or not stack:
            return func(*args, **kwargs)
        call_id = next(self.p._ids)
        self.p._calls[call_id] = (stack[-1], name)
        if self.p._collects(name):
            key = sample_key((args, kwargs))
            seen = self.p._samples[name]
            if key not in seen:
                seen[key] = [0, keep_sample(args, kwargs)]
            seen[key][0] += 1
        with record_function(f"{RANGE_PREFIX}{call_id}"):
            return func(*args, **kwargs)


class ModuleFunctionKernelProfiler:
    """function_names: functions whose input samples are kept (None: all; profiling covers all)."""

    def __init__(self, function_names: Iterable[str] | None = None):
        self.function_names = set(function_names) if function_names is not None else None
        self._names = functional_names()

    def _collects(self, name: str) -> bool:
        return self.function_names is None or name in self.function_names

    def get_functions_to_patch(self, module: Any = F) -> list[tuple[str, Any]]:
        """AITune's method: the (name, function) pairs of torch.nn.functional whose calls profile() records
        (all of them, whatever function_names keeps samples of)."""
        if module is not F:
            raise ValueError("only torch.nn.functional's calls are profiled here")
        return sorted(((name, fn) for fn, name in self._names.items()), key=lambda pair: pair[0])

    def profile(self, function: Callable, data: Sequence | None = None, *, module: nn.Module | None = None,
                warmup_iterations: int = 3, teardown_cupti: bool = True) -> tuple[pd.DataFrame, dict[str, FunctionData]]:
        """Run function over data (None: once with no arguments) under the profiler.

        teardown_cupti: detach CUPTI after a CUDA trace (see the module docstring; False in a Ray driver).

        Returns the rows (module_name, module, function_name, op, kernel, kernel_us) and, per function,
        its distinct samples with call counts. On CUDA kernel_us is kernel time; on CPU it is op time.
        """
        if module is None and isinstance(function, nn.Module):
            module = function
        if module is None:
            raise ValueError("module must be provided when function is not an nn.Module")
        if warmup_iterations < 0:
            raise ValueError("warmup_iterations must be greater than or equal to 0")
        cuda = uses_cuda(module, data)
        with torch.no_grad():
            for _ in range(warmup_iterations):
                _run(function, data)
        for attempt in (1, 2):
            frame, function_data = self._trace(function, data, module, cuda, teardown_cupti)
            if not cuda or len(frame) or attempt == 2:
                return frame, function_data
            # A trace can come back without GPU activity when CUPTI is still being torn down after the
            # previous one (Kineto gives up waiting for that and traces without it): once more.
            logger.warning("the CUDA trace held no kernel attributed to a functional call; profiling again")
        raise AssertionError("unreachable")

    def _trace(self, function: Callable, data, module: nn.Module, cuda: bool, teardown: bool = True):
        if cuda:
            torch.cuda.synchronize()
            prime_cuda_profiler(teardown)
        self._local = threading.local()
        self._ids = itertools.count(1)
        self._calls: dict[int, tuple[str, str]] = {}
        self._samples: dict[str, dict[Any, list]] = collections.defaultdict(dict)
        named = list(module.named_modules())
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        handles = self._hook_modules(named)
        try:
            with _cupti_released(teardown, cuda), profile(activities=activities) as prof, torch.no_grad():
                with _Recorder(self):
                    _run(function, data)
                if cuda:
                    torch.cuda.synchronize()
        finally:
            for handle in handles:
                handle.remove()
        import pandas as pd

        rows = self._attribute(prof.profiler.function_events, dict(named), cuda)
        frame = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
        timed = set(frame["function_name"]) if len(frame) else set()
        function_data = {name: [(count, sample) for count, sample in seen.values()]
                         for name, seen in self._samples.items() if name in timed}
        return frame, function_data

    def _hook_modules(self, named: list[tuple[str, nn.Module]]) -> list:
        local = self._local
        handles = []
        for name, sub in named:
            def enter(_module, _args, _name=name):
                stack = getattr(local, "stack", None)
                if stack is None:
                    stack = local.stack = []
                stack.append(_name)

            def leave(_module, _args, _output):
                stack = getattr(local, "stack", None)
                if stack:
                    stack.pop()

            handles.append(sub.register_forward_pre_hook(enter, prepend=True))
            handles.append(sub.register_forward_hook(leave, always_call=True))
        return handles

    def _attribute(self, events, modules: dict[str, nn.Module], cuda: bool) -> list[dict]:
        rows = []
        for event in events:
            if event.key.startswith(RANGE_PREFIX) or "::" not in event.key:
                continue
            found = _enclosing_call(event)
            if found is None:
                continue
            call_id, top_op = found
            module_name, function_name = self._calls.get(call_id, (None, None))
            if module_name is None:
                continue
            base = {"module_name": module_name, "module": modules.get(module_name), "function_name": function_name}
            if cuda:
                for kernel in getattr(event, "kernels", None) or []:
                    rows.append({**base, "op": event.key, "kernel": kernel.name, "kernel_us": float(kernel.duration)})
            elif event.self_cpu_time_total > 0:
                rows.append({**base, "op": top_op, "kernel": event.key,
                             "kernel_us": float(event.self_cpu_time_total)})
        return rows

    def describe_results(self, profiling_df: pd.DataFrame, function_data: dict[str, FunctionData],
                         top_k: int = 10) -> pd.DataFrame:
        """Per function, the top_k by time: calls, num_distinct_samples, num_modules, time_spent_us,
        time_spent_pct (of all profiled functions) and tensor_size_MB (inputs of the distinct samples)."""
        import pandas as pd

        if profiling_df.empty:
            return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
        times = profiling_df.groupby("function_name")["kernel_us"].sum()
        total = float(times.sum())
        rows = []
        for name, spent in times.nlargest(top_k).items():
            data = function_data.get(name)
            rows.append({
                "function_name": name,
                "calls": sum(c for c, _ in data) if data is not None else float("nan"),
                "num_distinct_samples": len(data) if data is not None else float("nan"),
                "num_modules": int(profiling_df.loc[profiling_df["function_name"] == name, "module_name"].nunique()),
                "time_spent_us": float(spent),
                "time_spent_pct": float(spent) / total * 100.0 if total else 0.0,
                "tensor_size_MB": (sum(tensor_bytes(s) for _, s in data) / 1024 ** 2
                                   if data is not None else float("nan")),
            })
        return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def _enclosing_call(event) -> tuple[int, str] | None:
    """(call id, the op directly under that call's range) of the nearest enclosing call range."""
    below, parent = event, getattr(event, "cpu_parent", None)
    while parent is not None:
        if parent.key.startswith(RANGE_PREFIX):
            try:
                return int(parent.key[len(RANGE_PREFIX):]), below.key
            except ValueError:
                return None
        below, parent = parent, getattr(parent, "cpu_parent", None)
    return None
