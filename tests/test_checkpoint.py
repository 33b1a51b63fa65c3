"""Checkpoints: round trips (JIT, AOT, eager, pipelines), device_map, bad files, atomic writes, no pickle."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import Backend, BackendConfig, BackendState, ONNXRuntimeBackend, ONNXRuntimeBackendConfig
from aitune_ray.backend import TorchEagerBackend
from aitune_ray.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from aitune_ray.errors import (CheckpointError, CheckpointIntegrityError, CheckpointMismatchError,
                               CheckpointTruncatedError, CheckpointVersionError, ConfigError, DeviceError)
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.api.module import ModuleState

FAST = MeasureConfig(warmup_runs=1, min_runs=3, max_runs=5, max_seconds=0.05)


# ----- a tiny JIT backend: a recipe (its config) that is rebuilt at load ---------------------------------

@dataclasses.dataclass
class OffsetBackendConfig(BackendConfig):
    offset: float = 0.0


class OffsetBackend(Backend):
    """Adds config.offset to the module's output; counts how often it was built."""

    config_class = OffsetBackendConfig
    is_jit = True
    builds = 0

    def _build(self, module, samples, device, workdir):
        type(self).builds += 1
        self._module = module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._module(*args, **kwargs) + self.config.offset

    def _state(self) -> dict:
        return {"note": "rebuilt from config"}


# ----- helpers ---------------------------------------------------------------------------------------------

def mlp(width: int = 16, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4)).eval()


class Tied(nn.Module):
    """Two layers sharing one weight tensor."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 8)
        self.second.weight = self.first.weight

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def strategy(backend: Backend, **kwargs):
    return ait.OneBackendStrategy(backend, measure_config=FAST, **kwargs).enable_performance_validation(False)


def wrap(model: nn.Module, backend: Backend | None = None, name: str = "m", **kwargs) -> ait.Module:
    return ait.Module(model, name, strategy=strategy(backend, **kwargs) if backend is not None else None)


def tuned(model: nn.Module, backend: Backend, name: str = "m", **kwargs) -> ait.Module:
    wrapped = wrap(model, backend, name, **kwargs)
    for batch in (1, 3):
        wrapped(torch.randn(batch, 8))
    wrapped.tune(device="cpu")
    return wrapped


def onnx_backend() -> ONNXRuntimeBackend:
    return ONNXRuntimeBackend(ONNXRuntimeBackendConfig(use_dynamo=False))  # the fast TorchScript exporter


def rewrite(path: Path, member: str, change, fix_manifest_hash: bool = False) -> None:
    """Rebuild the archive (a valid zip again) with member's bytes replaced by change(bytes)."""
    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    parts[member] = change(parts[member])
    if fix_manifest_hash:
        parts["manifest.sha256"] = (hashlib.sha256(parts["manifest.json"]).hexdigest() + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)


def edit_manifest(path: Path, edit, fix_hash: bool = True) -> None:
    def change(data: bytes) -> bytes:
        manifest = json.loads(data)
        edit(manifest)
        return json.dumps(manifest).encode()

    rewrite(path, "manifest.json", change, fix_manifest_hash=fix_hash)


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def weights_of(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


X = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def onnx_ckpt(tmp_path_factory):
    """A module tuned with ONNX Runtime (AOT), its outputs on X, and its checkpoint."""
    wrapped = tuned(mlp(), onnx_backend())
    path = tmp_path_factory.mktemp("onnx") / "m.ait"
    ait.save(wrapped, path)
    return wrapped(X), path


@pytest.fixture
def onnx_copy(onnx_ckpt, tmp_path):
    expected, path = onnx_ckpt
    copy = tmp_path / "m.ait"
    copy.write_bytes(path.read_bytes())
    return expected, copy


# ----- round trips -------------------------------------------------------------------------------------------

def test_jit_round_trip_rebuilds_recipe_and_restores_tied_weights(tmp_path):
    wrapped = tuned(Tied(seed=0), OffsetBackend(OffsetBackendConfig(offset=0.5)), tolerance=10.0)
    assert wrapped.state == ModuleState.TUNED
    expected = wrapped(X)
    path = ait.save(wrapped, tmp_path / "tied.ait")
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
    entry = manifest["modules"][0]
    assert manifest["format_version"] == FORMAT_VERSION
    assert entry["backend"]["type"].endswith(":OffsetBackend") and entry["backend"]["config"] == {"offset": 0.5}
    assert entry["state"] == {"note": "rebuilt from config"} and entry["artifacts"] == {}
    assert entry["device"] == "cpu" and entry["signature"]["batch_sizes"] == [1, 3]
    assert {"torch", "python", "aitune_ray"} <= set(manifest["versions"])

    fresh = ait.Module(Tied(seed=1), "m")
    builds = OffsetBackend.builds
    assert ait.load(fresh, path) is fresh
    assert OffsetBackend.builds == builds + 1                       # JIT: rebuilt from its recipe
    assert fresh.state == ModuleState.TUNED and isinstance(fresh.backend, OffsetBackend)
    assert fresh.backend.config.offset == 0.5 and fresh.backend.state == BackendState.DEPLOYED
    assert torch.equal(fresh(X), expected)
    assert same_weights(fresh.module.state_dict(), wrapped.module.state_dict())
    assert fresh.module.second.weight is fresh.module.first.weight   # the user's tie is kept


def test_aot_round_trip_loads_artifact_without_rebuilding(onnx_ckpt, monkeypatch, tmp_path):
    expected, path = onnx_ckpt
    with zipfile.ZipFile(path) as z:
        assert "modules/0/artifacts/model.onnx" in z.namelist()
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["modules"][0]["is_jit"] is False and "onnxruntime" in manifest["versions"]

    def no_export(*args, **kwargs):
        raise AssertionError("an AOT backend must load its artifact, not export again")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    fresh = ait.Module(mlp(seed=7), "m")
    load_checkpoint(fresh, path)
    assert isinstance(fresh.backend, ONNXRuntimeBackend) and fresh.backend.state == BackendState.DEPLOYED
    assert torch.equal(fresh(X), expected)
    assert torch.allclose(fresh.module(X), expected, atol=1e-5)     # weights restored into the eager module

    again = ait.Module(mlp(seed=8), "m")                            # a loaded module saves again as it was
    load_checkpoint(again, save_checkpoint(fresh, tmp_path / "again.ait"))
    assert torch.equal(again(X), expected)
    with zipfile.ZipFile(tmp_path / "again.ait") as z:
        assert json.loads(z.read("manifest.json"))["modules"][0]["signature"] == manifest["modules"][0]["signature"]


def test_eager_after_tuning_is_stored_as_eager(tmp_path):
    wrapped = tuned(mlp(), TorchEagerBackend())
    wrapped.stay_eager("kept eager")
    path = save_checkpoint(wrapped, tmp_path / "eager.ait")
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("manifest.json"))["modules"][0]["backend"] == "eager"
    fresh = ait.Module(mlp(seed=3), "m")
    load_checkpoint(fresh, path)
    assert fresh.state == ModuleState.EAGER and fresh.backend is None
    assert torch.equal(fresh(X), wrapped(X))


class Pipeline:
    def __init__(self, seed: int = 0, with_backends: bool = True):
        enc, dec = mlp(seed=seed), nn.Sequential(nn.Linear(4, 4))
        self.encoder = wrap(enc, TorchEagerBackend() if with_backends else None, "enc")
        self.decoder = wrap(dec, OffsetBackend(OffsetBackendConfig(offset=1.0)) if with_backends else None, "dec",
                            **({"tolerance": 10.0} if with_backends else {}))

    def __call__(self, x):
        return self.decoder(self.encoder(x))


def test_pipeline_round_trip_with_device_map(tmp_path):
    pipe = Pipeline(seed=0)
    ait.tune(pipe, [torch.randn(2, 8), torch.randn(3, 8)], device="cpu", call_as_given=True)
    expected = pipe(X)
    path = ait.save(pipe, tmp_path / "pipe.ait")
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("manifest.json"))["module_names"] == ["decoder", "encoder"]

    fresh = Pipeline(seed=5, with_backends=False)
    ait.load(fresh, path, device_map={"encoder": "cpu", "dec": "cpu"})   # attribute path and Module name
    assert fresh.encoder.backend.device == torch.device("cpu") == fresh.decoder.backend.device
    assert isinstance(fresh.encoder.backend, TorchEagerBackend) and isinstance(fresh.decoder.backend, OffsetBackend)
    assert torch.equal(fresh(X), expected)


def test_tuned_device_missing_here_needs_device_map(tmp_path):
    wrapped = tuned(mlp(), TorchEagerBackend())
    path = ait.save(wrapped, tmp_path / "m.ait")
    edit_manifest(path, lambda m: m["modules"][0].update(device="cuda:0"))
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    fresh = ait.Module(mlp(seed=2), "m")
    with pytest.raises(DeviceError, match="device_map"):
        ait.load(fresh, path)
    assert fresh.state == ModuleState.RECORDING
    ait.load(fresh, path, device_map={"": "cpu"})
    assert fresh.backend.device == torch.device("cpu") and torch.equal(fresh(X), wrapped(X))


def test_bad_device_map_key_lists_valid_names(tmp_path):
    pipe = Pipeline()
    ait.tune(pipe, [torch.randn(2, 8)], device="cpu", call_as_given=True)
    path = ait.save(pipe, tmp_path / "pipe.ait")
    with pytest.raises(ConfigError) as err:
        ait.load(Pipeline(with_backends=False), path, device_map={"encodr": "cpu"})
    assert "encodr" in str(err.value) and "'encoder'" in str(err.value) and "'decoder'" in str(err.value)


# ----- bad files -------------------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist") as err:
        ait.load(ait.Module(mlp(), "m"), tmp_path / "nothing.ait")
    assert type(err.value) is CheckpointError


@pytest.mark.parametrize("cut", ["half", "tail", "not_zip", "zip_without_manifest"])
def test_truncated_or_foreign_file(onnx_copy, cut):
    _, path = onnx_copy
    data = path.read_bytes()
    if cut == "half":
        path.write_bytes(data[: len(data) // 2])
    elif cut == "tail":
        path.write_bytes(data[:-10])
    elif cut == "not_zip":
        path.write_bytes(b"just some text, not a checkpoint")
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("other.txt", "hello")
    fresh = ait.Module(mlp(seed=4), "m")
    with pytest.raises(CheckpointTruncatedError):
        ait.load(fresh, path)
    assert fresh.state == ModuleState.RECORDING


@pytest.mark.parametrize("member, named", [("modules/0/weights.safetensors", "weights.safetensors"),
                                           ("modules/0/artifacts/model.onnx", "model.onnx"),
                                           ("manifest.json", "manifest.json")])
def test_tampered_part_is_detected_before_anything_changes(onnx_copy, member, named):
    _, path = onnx_copy
    if member == "manifest.json":
        edit_manifest(path, lambda m: m["modules"][0].update(device="cpu:0"), fix_hash=False)
    else:
        rewrite(path, member, flip_last_byte)
    tampered = path.read_bytes()
    fresh = ait.Module(mlp(seed=4), "m")
    before = weights_of(fresh.module)
    with pytest.raises(CheckpointIntegrityError, match=named):
        ait.load(fresh, path)
    assert fresh.state == ModuleState.RECORDING and fresh.backend is None
    assert same_weights(weights_of(fresh.module), before)
    assert path.read_bytes() == tampered


def test_corrupted_bytes_in_place_are_detected(onnx_copy):
    _, path = onnx_copy
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("modules/0/weights.safetensors")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size - 1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointIntegrityError, match="weights.safetensors"):
        ait.load(ait.Module(mlp(seed=4), "m"), path)


def test_shape_mismatch_names_tensor_and_shapes(onnx_copy):
    _, path = onnx_copy
    wider = ait.Module(mlp(width=32), "m")
    before = weights_of(wider.module)
    with pytest.raises(CheckpointMismatchError) as err:
        ait.load(wider, path)
    text = str(err.value)
    assert "'0.weight'" in text and "(16, 8)" in text and "(32, 8)" in text
    assert same_weights(weights_of(wider.module), before) and wider.state == ModuleState.RECORDING


def test_module_names_from_another_model(onnx_copy):
    _, path = onnx_copy
    with pytest.raises(CheckpointMismatchError, match="do not exist"):
        ait.load(Pipeline(with_backends=False), path)


def test_newer_format_version(onnx_copy):
    _, path = onnx_copy
    edit_manifest(path, lambda m: m.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(CheckpointVersionError, match=f"version {FORMAT_VERSION + 1}"):
        ait.load(ait.Module(mlp(), "m"), path)


# ----- writing ------------------------------------------------------------------------------------------------

def test_failed_save_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    from aitune_ray.checkpoint import format as fmt

    wrapped = tuned(mlp(), TorchEagerBackend())
    path = ait.save(wrapped, tmp_path / "m.ait")
    old = path.read_bytes()
    with torch.no_grad():
        wrapped.module[0].weight.add_(1.0)                     # a new save would differ
    seen = []

    def fail(*args, **kwargs):
        seen.append(sorted(os.listdir(tmp_path)))                   # weights are written by now
        raise OSError("disk full")

    monkeypatch.setattr(fmt, "dump_manifest", fail)
    with pytest.raises(CheckpointError, match="disk full"):
        ait.save(wrapped, path)
    assert len(seen) == 1 and any(n.startswith(".m.ait.") and n.endswith(".tmp") for n in seen[0])
    assert path.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["m.ait"]
    monkeypatch.undo()
    ait.save(wrapped, path)
    assert path.read_bytes() != old


def test_saving_untuned_module_says_tune_first(tmp_path):
    path = ait.save(tuned(mlp(), TorchEagerBackend()), tmp_path / "m.ait")
    old = path.read_bytes()
    recording = wrap(mlp(), TorchEagerBackend())
    recording(torch.randn(2, 8))
    with pytest.raises(CheckpointError, match="tune"):
        ait.save(recording, path)
    assert path.read_bytes() == old and sorted(os.listdir(tmp_path)) == ["m.ait"]


def test_checkpoint_holds_no_pickle_and_loads_without_unpickling(onnx_ckpt, monkeypatch):
    expected, path = onnx_ckpt
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            data = z.read(name)
            assert not data.startswith(b"\x80") and b"data.pkl" not in data, name

    def forbidden(*args, **kwargs):
        raise AssertionError("loading a checkpoint must not unpickle")

    class NoUnpickler:
        def __init__(self, *args, **kwargs):
            forbidden()

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", NoUnpickler)
    monkeypatch.setattr(torch, "load", forbidden)
    fresh = ait.Module(mlp(seed=9), "m")
    load_checkpoint(fresh, path)
    assert torch.equal(fresh(X), expected)


KILLED_SAVE = """
import sys, threading
import aitune_ray as ait
from aitune_ray.backend import TorchEagerBackend
from aitune_ray.checkpoint import format as fmt
from tests.hostile import mlp, tuned

def stop_here(*args, **kwargs):   # the weights are written, the manifest not yet: the parent kills us now
    print("writing", flush=True)
    threading.Event().wait()

wrapped = tuned(mlp(), TorchEagerBackend(), "m")
fmt.dump_manifest = stop_here
ait.save(wrapped, sys.argv[1])
"""


def test_a_save_removes_what_a_killed_save_of_the_same_file_left(tmp_path):
    """A save killed mid-write leaves .m.ait.HEX.tmp; the next save of m.ait removes it, and only it: not a
    save in progress (it holds its file locked), not other files' temporaries, not look-alikes."""
    import fcntl
    import signal
    import subprocess
    import sys

    path = tmp_path / "m.ait"
    child = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, str(path)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parent.parent)
    try:
        assert child.stdout.readline() == "writing\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".m.ait.") and left[0].endswith(".tmp"), left
    in_progress = tmp_path / ".m.ait.0123456789ab.tmp"
    keep = [in_progress, tmp_path / ".other.ait.0123456789ab.tmp", tmp_path / ".m.ait.notahexname.tmp",
            tmp_path / "m.ait.0123456789ab.tmp"]
    for file in keep:
        file.write_bytes(b"x")
    with open(in_progress, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        ait.save(tuned(mlp(), TorchEagerBackend()), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.ait", *(p.name for p in keep)])
    assert ait.load(ait.Module(mlp(), "m"), path).backend is not None
