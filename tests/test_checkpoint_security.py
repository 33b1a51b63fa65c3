"""Hostile checkpoints: a file never chooses which code runs, never writes outside the load's folder, and every
malformed part is refused with a one-line CheckpointError before anything in the user's object changes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aitune_ray as ait
from aitune_ray.backend import Backend, TorchEagerBackend
from aitune_ray.errors import CheckpointError, UnknownClassError
from aitune_ray.kernel_forge import KernelProvider
from aitune_ray.module import ModuleState
from aitune_ray.registry import untrusted
from tests import hostile
from tests.hostile import Bait, Sandbox, X, edit_manifest, mlp, snapshot, tuned


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An ONNX Runtime (AOT) module's checkpoint and its outputs on X."""
    wrapped = tuned(mlp(), hostile.onnx_backend(), "m")
    path = tmp_path_factory.mktemp("saved") / "m.ait"
    ait.save(wrapped, path)
    ait.load(ait.Module(mlp(seed=3), "m"), path)   # a first load imports what loading needs (onnx, ...)
    return path, wrapped(X)


@pytest.fixture
def setup(saved, tmp_path):
    """(checkpoint copy, bait module, sandboxed temp folder)."""
    path = tmp_path / "m.ait"
    shutil.copy(saved[0], path)
    bait, sandbox = Bait(tmp_path), Sandbox(tmp_path)
    yield path, bait, sandbox
    sandbox.close()
    bait.remove()


def refused(path: Path, bait: Bait, sandbox: Sandbox, error=CheckpointError, match: str | None = None,
            **load_args) -> str:
    """Load path into a fresh Module: it must raise error (one line), change nothing, import nothing, and leave
    nothing behind. Returns the message."""
    fresh = ait.Module(mlp(seed=4), "m")
    before, modules = snapshot(fresh.module), set(sys.modules)
    outside, temporary = hostile.files_under(path.parent.parent), sandbox.leftovers()
    with pytest.raises(error, match=match) as err:
        ait.load(fresh, path, **load_args)
    message = str(err.value)
    assert "\n" not in message and len(message) < 2000, message
    assert fresh.state == ModuleState.RECORDING and fresh.backend is None
    assert hostile.same_state(fresh.module, before)
    assert not bait.imported(), "the checkpoint imported the module it names"
    assert hostile.new_modules(modules) == []
    assert sandbox.leftovers() == temporary, "the load left files in its temporary folder"
    assert hostile.files_under(path.parent.parent) - outside == set(), "the load wrote files"
    return message


# ----- a checkpoint never imports what it names -------------------------------------------------------------

def test_backend_type_naming_other_code_is_refused_and_never_imported(setup):
    """The attack as filed: backend.type rewritten to importable code and manifest.sha256 recomputed."""
    path, bait, sandbox = setup
    edit_manifest(path, lambda m: m["modules"][0]["backend"].update(type=bait.path()))
    message = refused(path, bait, sandbox, UnknownClassError)
    assert bait.path() in message and "nothing was imported" in message and "backends=[Evil]" in message


def test_kernel_plan_naming_other_code_is_refused_and_never_imported(tmp_path):
    from tests.forge_helpers import TestGeluProvider
    from tests.test_kernel_forge import gelu_norm_samples, selector_config, tuned_module

    from aitune_ray.backend import KernelSelectorBackend

    backend = KernelSelectorBackend(selector_config(TestGeluProvider("cached")), TorchEagerBackend())
    wrapped = tuned_module(backend, gelu_norm_samples())
    path = ait.save(wrapped, tmp_path / "ks.ait")
    bait, sandbox = Bait(tmp_path), Sandbox(tmp_path)
    try:
        def point_at_bait(manifest):
            state = manifest["modules"][0]["state"]
            hostile.set_key(state, "class", bait.path())
            hostile.set_key(state, "type", "Evil", where="class")

        edit_manifest(path, point_at_bait)
        fresh = type(wrapped.module)()
        with pytest.raises(UnknownClassError, match="kernel provider type") as err:
            ait.load(ait.Module(fresh, "m"), path)
        assert bait.path() in str(err.value) and "providers=[Evil]" in str(err.value)
        assert not bait.imported() and sandbox.leftovers() == set()
    finally:
        sandbox.close()
        bait.remove()


def test_classes_of_user_code_are_known_and_others_can_be_passed(setup):
    """A class defined in the loading code is known; one saved from a script ('__main__:...') loads
    elsewhere once it is passed to load()."""
    path, bait, sandbox = setup

    class ScriptBackend(TorchEagerBackend):
        pass

    wrapped = tuned(mlp(), ScriptBackend(), "m")
    ait.save(wrapped, path)
    assert type(ait.load(ait.Module(mlp(seed=4), "m"), path).backend) is ScriptBackend
    edit_manifest(path, lambda m: m["modules"][0]["backend"].update(type="__main__:ScriptBackend"))
    message = refused(path, bait, sandbox, UnknownClassError, match="backends=\\[ScriptBackend\\]")
    assert "'__main__:ScriptBackend'" in message
    loaded = ait.load(ait.Module(mlp(seed=4), "m"), path, backends=[ScriptBackend])
    assert type(loaded.backend) is ScriptBackend and loaded(X).equal(wrapped(X))


def test_driver_made_specs_keep_import_paths_outside_checkpoints(setup):
    """The Ray path: an actor that never imported the user's module finds a class by its path."""
    _, bait, _ = setup
    with untrusted():
        with pytest.raises(UnknownClassError):
            Backend.from_spec({"type": bait.path(), "config": {}})
        with pytest.raises(UnknownClassError):
            KernelProvider.from_dict({"type": "Evil", "class": bait.path()})
    assert not bait.imported()
    assert isinstance(Backend.from_spec({"type": bait.path(), "config": {}}), TorchEagerBackend)
    assert bait.imported()


# ----- hostile archives -------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(hostile.ARCHIVE_CASES))
def test_hostile_archive_is_refused(setup, case):
    path, bait, sandbox = setup
    build, match = hostile.ARCHIVE_CASES[case]
    build(path, bait)
    refused(path, bait, sandbox, match=match)
    assert not (path.parent.parent / "escaped.txt").exists() and not Path("/tmp/escaped-aitune.txt").exists()


def test_wrong_json_type_in_every_manifest_field_is_refused(setup):
    path, bait, sandbox = setup
    original = path.read_bytes()
    cases = list(hostile.wrong_type_cases(hostile.manifest_of(path)))
    assert len(cases) > 60
    for where, manifest in cases:
        path.write_bytes(original)
        hostile.with_manifest(path, json.dumps(manifest).encode())
        try:
            refused(path, bait, sandbox)
        except BaseException as exc:
            raise AssertionError(f"manifest field {where}: {type(exc).__name__}: {exc}") from exc


def test_pytree_spec_naming_unknown_types_is_refused(setup):
    path, bait, sandbox = setup
    spec = json.dumps([1, {"type": f"{bait.name}.Evil", "context": "null", "children_spec": []}])
    edit_manifest(path, lambda m: hostile.set_key(m["modules"][0]["state"], "output_spec", spec))
    assert "not registered" in refused(path, bait, sandbox, match="could not be restored")


def _shared_library(folder: Path, marker: Path) -> Path | None:
    """A shared object whose loading writes marker (None where no C compiler is installed)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    source = folder / "lib.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void loaded(void) {\n'
                      f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n')
    library = folder / "libcustomops.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True,
                   capture_output=True)
    return library


def test_onnx_artifact_naming_a_custom_op_library_is_refused(setup, tmp_path, monkeypatch):
    path, bait, sandbox = setup
    marker = tmp_path / "library-loaded"
    library = _shared_library(tmp_path, marker)
    shown = str(library or tmp_path / "libcustomops.so")
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")   # lets ONNX Runtime read session options from a model
    hostile.replace_onnx(path, lambda model: hostile.add_custom_op(model, shown))
    message = refused(path, bait, sandbox, match="custom")
    assert "ai.custom" in message
    assert not marker.exists()
    assert shown not in Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else True


def test_onnx_artifact_with_external_data_outside_the_checkpoint_is_refused(setup):
    path, bait, sandbox = setup
    hostile.replace_onnx(path, lambda model: hostile.point_data_outside(model, "../../../etc/hostname"))
    assert "etc/hostname" in refused(path, bait, sandbox, match="not an artifact of this module")


def test_intact_checkpoint_still_loads(saved):
    path, expected = saved
    loaded = ait.load(ait.Module(mlp(seed=4), "m"), path)
    assert loaded(X).equal(expected)


# ----- opt-in signing -----------------------------------------------------------------------------------------

def test_signing_is_opt_in_and_a_key_refuses_edited_unsigned_or_foreign_files(saved, setup):
    from aitune_ray.errors import CheckpointSignatureError

    path, bait, sandbox = setup
    wrapped = tuned(mlp(), hostile.onnx_backend(), "m")
    signed = ait.save(wrapped, path.with_name("signed.ait"), signing_key=b"our key")
    assert ait.load(ait.Module(mlp(seed=4), "m"), signed, signing_key=b"our key")(X).equal(wrapped(X))
    assert ait.load(ait.Module(mlp(seed=4), "m"), signed)(X).equal(wrapped(X))       # a key is opt-in
    refused(signed, bait, sandbox, CheckpointSignatureError, match="another key", signing_key="their key")
    refused(path, bait, sandbox, CheckpointSignatureError, match="not signed", signing_key=b"our key")
    # the attack that the SHA-256 alone cannot stop: an edited manifest with its hash recomputed
    edit_manifest(signed, lambda m: m["modules"][0].update(name="renamed"))
    assert ait.load(ait.Module(mlp(seed=4), "m"), signed).name == "m"                  # hashes agree again
    refused(signed, bait, sandbox, CheckpointSignatureError, match="changed", signing_key=b"our key")


# ----- compiled native code -------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["shared object", "package holding one"])
def test_an_artifact_of_native_code_loads_only_when_trusted(setup, form):
    """An AOTInductor package holds a shared library that runs as it loads: refused unless allowed or signed."""
    import io
    import zipfile

    path, bait, sandbox = setup
    elf = Path(sys.executable).resolve().read_bytes()[:4096]
    if form == "package holding one":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as package:
            package.writestr("model/data/aotinductor/model/kernels.so", elf)
        elf = buffer.getvalue()
    hostile.replace_artifact(path, elf)
    assert "allow_native_code=True" in refused(path, bait, sandbox, match="compiled native code")
    # trusted: the native-code check lets it through, and ONNX Runtime's own load is what refuses this one
    message = refused(path, bait, sandbox, match="model.onnx", allow_native_code=True)
    assert "native code" not in message
