"""aitune-ray inspect: what a checkpoint holds, every hash verified, and nothing it names imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aitune_ray.backend import TorchEagerBackend
from aitune_ray.checkpoint import save_checkpoint
from aitune_ray.command.cli import main
from aitune_ray.errors import CheckpointIntegrityError
from aitune_ray.checkpoint.inspection import inspect_checkpoint
from tests.report_helpers import REPO
from tests.test_checkpoint import edit_manifest, flip_last_byte, mlp, onnx_backend, rewrite, tuned


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect") / "m.ait"
    save_checkpoint(tuned(mlp(), onnx_backend(), name="encoder"), path)
    return path


def test_summary_names_modules_backend_parts_and_versions(checkpoint, capsys):
    summary = inspect_checkpoint(checkpoint)
    (module,) = summary["modules"]
    assert module["name"] == "encoder" and module["backend"] == "ONNXRuntimeBackend" and module["is_jit"] is False
    assert module["backend_type"] == "aitune_ray.backend.onnx_runtime:ONNXRuntimeBackend"
    assert module["config"]["use_dynamo"] is False
    assert module["signature"]["batch_sizes"] == [1, 3]
    assert set(module["parts"]) == {"weights", "artifact model.onnx"}
    assert all(p["verified"] and p["size"] > 0 for p in module["parts"].values())
    assert {"torch", "onnxruntime", "python"} <= set(summary["versions"])
    assert main(["inspect", str(checkpoint)]) == 0
    printed = capsys.readouterr().out
    assert "module (the whole model) named 'encoder', tuned on cpu: ONNXRuntimeBackend (AOT" in printed
    assert "hashes: all 3 parts verified" in printed
    assert main(["inspect", "--json", str(checkpoint)]) == 0
    assert json.loads(capsys.readouterr().out)["modules"][0]["name"] == "encoder"


def test_a_changed_part_fails_with_its_name(checkpoint, tmp_path, capsys):
    bad = tmp_path / "bad.ait"
    bad.write_bytes(checkpoint.read_bytes())
    rewrite(bad, "modules/0/artifacts/model.onnx", flip_last_byte)
    with pytest.raises(CheckpointIntegrityError, match="modules/0/artifacts/model.onnx"):
        inspect_checkpoint(bad)
    assert main(["inspect", str(bad)]) == 1
    assert "does not match its recorded SHA-256" in capsys.readouterr().err


def test_a_changed_manifest_fails(checkpoint, tmp_path):
    bad = tmp_path / "bad.ait"
    bad.write_bytes(checkpoint.read_bytes())
    edit_manifest(bad, lambda m: m["modules"][0].update(name="other"), fix_hash=False)
    with pytest.raises(CheckpointIntegrityError, match="manifest"):
        inspect_checkpoint(bad)


def test_nothing_the_checkpoint_names_is_imported(tmp_path):
    """A checkpoint naming a backend in a module that leaves a mark when imported: inspect, in a fresh
    interpreter, shows the type and never imports it."""
    package = tmp_path / "markpkg"
    package.mkdir()
    mark = tmp_path / "imported.txt"
    (package / "__init__.py").write_text(f"open({str(mark)!r}, 'w').write('imported')\n")
    path = tmp_path / "named.ait"
    save_checkpoint(tuned(mlp(), TorchEagerBackend(), name="m"), path)
    edit_manifest(path, lambda m: m["modules"][0].update(backend={"type": "markpkg.backend:Planted", "config": {}}))
    code = f"""
import sys
sys.path[:0] = [{str(tmp_path)!r}, {str(REPO)!r}]
from aitune_ray.command.cli import main
code = main(["inspect", {str(path)!r}])
assert "markpkg" not in sys.modules, "inspect imported the module the checkpoint names"
sys.exit(code)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "backend type: markpkg.backend:Planted" in done.stdout
    assert not mark.exists()


def _one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err
    return lines[0]


@pytest.mark.parametrize("plan", [{"results": 5}, {"results": "abc"}, {"results": [5]}, {"providers": 7},
                                  {"providers": [None]}, {"results": {"selected": True}}])
def test_a_kernel_plan_of_wrong_types_is_one_error_line(checkpoint, tmp_path, capsys, plan):
    bad = tmp_path / "bad.ait"
    bad.write_bytes(checkpoint.read_bytes())
    edit_manifest(bad, lambda m: m["modules"][0]["state"].update(kernel_plan=plan))
    for argv in (["inspect", str(bad)], ["inspect", "--json", str(bad)]):
        assert main(argv) == 1
        assert "kernel_plan" in _one_error_line(capsys)


def test_running_out_of_memory_reading_a_checkpoint_is_one_error_line(checkpoint, capsys, monkeypatch):
    from aitune_ray.checkpoint import format as fmt

    def exhausted(*args, **kwargs):
        raise MemoryError()
    monkeypatch.setattr(fmt, "parse_manifest", exhausted)
    assert main(["inspect", str(checkpoint)]) == 1
    assert "MemoryError" in _one_error_line(capsys)
