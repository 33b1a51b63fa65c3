"""Compare a candidate's outputs with eager outputs: structure (each container's class too: a dict where eager
gives a ModelOutput fails), shape, dtype, NaN/Inf and relative L2 error."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from aitune_ray.model.structure import class_name

# Relative L2 error allowed by default, by output dtype. A compiler that only
# reorders floating-point work lands far below these; a wrong kernel far above.
DEFAULT_TOLERANCES: dict[torch.dtype, float] = {
    torch.float64: 1e-6,
    torch.float32: 1e-3,
    torch.float16: 1e-2,
    torch.bfloat16: 2e-2,
}


def default_tolerance(dtype: torch.dtype) -> float:
    """Relative L2 tolerance for an output of this dtype (0 for integer and bool outputs)."""
    if dtype in DEFAULT_TOLERANCES:
        return DEFAULT_TOLERANCES[dtype]
    if dtype.is_floating_point:  # float8 and friends
        return 1e-1
    return 0.0


@dataclasses.dataclass
class CorrectnessReport:
    """How far a candidate's outputs were from eager over every sample compared."""

    passed: bool
    max_error: float = 0.0          # worst relative L2 error seen (inf when not comparable)
    tolerance: float = 0.0          # tolerance at the output that had the worst error
    samples_compared: int = 0
    reason: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CorrectnessReport":
        return cls(**data)


class _Mismatch(Exception):
    pass


def _relative_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    out64 = out.detach().to("cpu", torch.float64)
    ref64 = ref.detach().to("cpu", torch.float64)
    bad_out = ~torch.isfinite(out64)
    bad_ref = ~torch.isfinite(ref64)
    if bool((bad_out & ~bad_ref).any()):
        raise _Mismatch(f"{int((bad_out & ~bad_ref).sum())} NaN/Inf values where eager has finite ones")
    if not torch.equal(bad_out, bad_ref):
        raise _Mismatch("finite values where eager has NaN/Inf")
    keep = ~bad_ref
    diff = torch.linalg.vector_norm((out64 - ref64)[keep])
    scale = torch.linalg.vector_norm(ref64[keep])
    if float(scale) == 0.0:
        return float(diff)
    return float(diff / scale)


def _same_class(out: Any, ref: Any, path: str) -> None:
    """A container of another class than eager's fails, named by both classes."""
    if isinstance(ref, (tuple, list, dict)) and class_name(type(out)) != class_name(type(ref)):
        raise _Mismatch(f"output{path}: a {_class_word(out)} where eager gives a {_class_word(ref)}")


def _class_word(obj: Any) -> str:
    return type(obj).__name__ if type(obj).__module__ == "builtins" else type(obj).__qualname__


def _walk(out: Any, ref: Any, path: str, pairs: list):
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor):
            raise _Mismatch(f"output{path}: expected a tensor, got {type(out).__name__}")
        if tuple(out.shape) != tuple(ref.shape):
            raise _Mismatch(f"output{path}: shape {tuple(out.shape)} differs from eager {tuple(ref.shape)}")
        if out.dtype != ref.dtype:
            raise _Mismatch(f"output{path}: dtype {out.dtype} differs from eager {ref.dtype}")
        pairs.append((path, out, ref))
    elif isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            raise _Mismatch(f"output{path}: expected a sequence of {len(ref)}, got {_shape_word(out)}")
        _same_class(out, ref, path)
        for i, (o, r) in enumerate(zip(out, ref)):
            _walk(o, r, f"{path}[{i}]", pairs)
    elif isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            raise _Mismatch(f"output{path}: expected keys {sorted(map(str, ref))}, got {_shape_word(out)}")
        _same_class(out, ref, path)
        for k in ref:
            _walk(out[k], ref[k], f"{path}[{k!r}]", pairs)
    elif isinstance(out, (torch.Tensor, tuple, list, dict)):
        raise _Mismatch(f"output{path}: expected the plain value {ref!r}, got {_shape_word(out)}")
    elif out != ref:
        raise _Mismatch(f"output{path}: value {out!r} differs from eager {ref!r}")


def _shape_word(obj: Any) -> str:
    if isinstance(obj, dict):
        return f"keys {sorted(map(str, obj))}"
    if isinstance(obj, (tuple, list)):
        return f"a sequence of {len(obj)}"
    if isinstance(obj, torch.Tensor):
        return f"a tensor of shape {tuple(obj.shape)}"
    return type(obj).__name__


def compare_outputs(pairs: list[tuple[Any, Any]], tolerance: float | None = None) -> CorrectnessReport:
    """Compare (candidate, eager) output pairs, one per sample.

    tolerance: one relative L2 bound for every floating output; None uses the per-dtype default.
    """
    worst, worst_tol, worst_where = 0.0, 0.0, ""
    for index, (out, ref) in enumerate(pairs):
        tensors: list = []
        try:
            _walk(out, ref, "", tensors)
            for path, o, r in tensors:
                tol = tolerance if tolerance is not None and r.dtype.is_floating_point else default_tolerance(r.dtype)
                err = _relative_l2(o, r)
                if err > worst or (math.isclose(err, worst) and not worst_where):
                    worst, worst_tol, worst_where = err, tol, f"sample {index} output{path}"
                if err > tol:
                    return CorrectnessReport(
                        False, err, tol, index + 1,
                        f"sample {index} output{path}: relative L2 error {err:.3g} exceeds tolerance "
                        f"{tol:.3g} ({err / tol if tol else math.inf:.1f}x over)")
        except _Mismatch as exc:
            return CorrectnessReport(False, math.inf, 0.0, index + 1, f"sample {index}: {exc}")
    return CorrectnessReport(True, worst, worst_tol, len(pairs), f"worst at {worst_where}" if worst_where else "")
