"""ONNXAutoCastConfig: mixed precision of an exported ONNX model by ModelOpt's ONNX autocast.

``modelopt.onnx.autocast.convert_to_mixed_precision`` runs the model once in ONNX Runtime on reference
inputs, keeps in fp32 the nodes whose values would overflow the low precision (``data_max``,
``init_max``) and casts the rest to fp16 or bf16. The reference inputs are the recorded samples (one
``.npz`` file each), not random data, so the decision rests on the values the model really sees. The
result is a strongly typed model: TensorRT builds exactly the precisions it names.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from aitune_ray.backend.backend import SAFE, BackendConfig, require
from aitune_ray.backend.onnx_export import flat_inputs
from aitune_ray.errors import BuildError, ConfigError, MissingDependencyError
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)

PRECISIONS = ("fp16", "bf16")
#: The extra that installs ModelOpt's ONNX autocast without its GPU-only pins.
EXTRA = "modelopt"


@dataclasses.dataclass
class ONNXAutoCastConfig(BackendConfig):
    """precision: "fp16" or "bf16". keep_io_types: inputs and outputs stay fp32 (casts inside the model).
    data_max / init_max: values above these keep a node (or an initializer) in fp32.
    op_types_to_exclude / nodes_to_exclude: op types / node-name patterns that stay fp32."""

    safe_fields = {name: SAFE for name in ("precision", "keep_io_types", "data_max", "init_max",
                                           "op_types_to_exclude", "nodes_to_exclude")}

    precision: str = "fp16"
    keep_io_types: bool = True
    data_max: float = 512.0
    init_max: float = 65504.0
    op_types_to_exclude: list[str] = dataclasses.field(default_factory=list)
    nodes_to_exclude: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"ONNXAutoCastConfig.precision must be one of {PRECISIONS}, not {self.precision!r}")
        if not (self.data_max > 0 and self.init_max > 0):
            raise ConfigError("ONNXAutoCastConfig.data_max and init_max must be positive")
        self.op_types_to_exclude = [str(o) for o in self.op_types_to_exclude]
        self.nodes_to_exclude = [str(n) for n in self.nodes_to_exclude]


def write_calibration(samples: SampleStore, folder: Path, names: Sequence[str]) -> Path:
    """One .npz per recorded sample, keyed by ONNX input name (ModelOpt reads a folder of them)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for index, sample in enumerate(samples):
        by_name = flat_inputs(sample.args, sample.kwargs)
        arrays = {n: _numpy(by_name[n]) for n in names}
        np.savez(folder / f"sample_{index:04d}.npz", **arrays)
    return folder


def _numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:   # numpy has no bfloat16; the exported fp32 model takes fp32 anyway
        t = t.float()
    return t.numpy()


def autocast_onnx(source: Path, target: Path, config: ONNXAutoCastConfig, samples: SampleStore | None = None,
                  providers: Sequence[str] = ("cpu",)) -> Path:
    """Convert the ONNX model at source to config.precision; save it at target and return target.

    samples: the recorded calls, used as ModelOpt's reference inputs (random data when None or empty).
    providers: ONNX Runtime providers for ModelOpt's reference run ("cpu", "cuda")."""
    onnx = require("onnx", "onnx", "ONNX autocast")
    try:
        from modelopt.onnx.autocast import convert_to_mixed_precision
    except ImportError as exc:
        raise _missing(exc) from exc
    source, target = Path(source), Path(target)
    names = [i.name for i in onnx.load(str(source), load_external_data=False).graph.input]
    calibration = None
    if samples is not None and len(samples):
        calibration = str(write_calibration(samples, target.parent / f"{target.stem}_calibration", names))
    logger.info("ONNX autocast to %s of %s (%s reference inputs)", config.precision, source.name,
                "recorded" if calibration else "random")
    try:
        model = convert_to_mixed_precision(
            onnx_path=str(source), low_precision_type=config.precision, keep_io_types=config.keep_io_types,
            data_max=config.data_max, init_max=config.init_max,
            op_types_to_exclude=list(config.op_types_to_exclude) or None,
            nodes_to_exclude=list(config.nodes_to_exclude) or None,
            calibration_data=calibration, providers=list(providers))
    except ImportError as exc:
        raise _missing(exc) from exc
    except Exception as exc:  # noqa: BLE001 - ModelOpt raises many kinds; one build error names the step
        raise BuildError(f"ONNX autocast to {config.precision} failed: {type(exc).__name__}: {exc}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


def _missing(exc: ImportError) -> MissingDependencyError:
    name = getattr(exc, "name", None) or "nvidia-modelopt"
    return MissingDependencyError(f"{name} (ModelOpt ONNX autocast)", EXTRA, "ONNXAutoCastConfig")
