"""Hostile checkpoints: a file never chooses which code runs, never writes outside the load's folder, and every
malformed part is refused with a one-line CheckpointError before anything in the user's object changes."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend import Backend, TorchEagerBackend
from aitune_ray.errors import CheckpointError, UnknownClassError
from aitune_ray.kernel_forge import KernelProvider
from aitune_ray.api.module import ModuleState
from aitune_ray.records.registry import untrusted
from tests import hostile
from tests.fault_helpers import without_temp_root
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
    gc.collect()   # modules an earlier line dropped (a wrapped module and its wrapper refer to each other) go now
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
    assert sandbox.leftovers() - temporary == set(), "the load left files in its temporary folder"
    assert without_temp_root(hostile.files_under(path.parent.parent) - outside) == set(), "the load wrote files"
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


def test_a_local_function_does_not_admit_other_operators_of_its_domain(setup, tmp_path):
    """The function 'ai.custom::Harmless' is the model's own; 'ai.custom::Evil' is not, and needs a library."""
    import onnx

    from aitune_ray.checkpoint.artifact_check import check_onnx_model

    path, bait, sandbox = setup
    hostile.replace_onnx(path, hostile.add_local_function_and_custom_op)
    assert "ai.custom::Evil" in refused(path, bait, sandbox, match="custom domain")
    model = onnx.load_from_string(hostile.part(path, "modules/0/artifacts/model.onnx"))
    model.graph.node[-1].op_type = "Harmless"     # a call of the model's own function is no custom op
    (tmp_path / "own.onnx").write_bytes(model.SerializeToString())
    check_onnx_model("m", "own.onnx", tmp_path / "own.onnx", {"own.onnx"})


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


# ----- code that runs as it loads: artifacts by their backend and format -------------------------------------

def test_an_artifact_no_backend_stores_counts_as_code(setup):
    """An artifact of a format the backend never writes (here a shared object beside the ONNX model) is code,
    whatever its bytes: refused unless trusted; trusted, nothing opens it and the model loads."""
    path, bait, sandbox = setup
    elf = Path(sys.executable).resolve().read_bytes()[:4096]
    hostile.write_parts(path, [(i.filename, d) for i, d in hostile.parts_of(path)]
                        + [("modules/0/artifacts/kernels.so", elf)])
    record = {"member": "modules/0/artifacts/kernels.so", "sha256": hashlib.sha256(elf).hexdigest(), "size": len(elf)}
    edit_manifest(path, lambda m: m["modules"][0]["artifacts"].update({"kernels.so": record}))
    message = refused(path, bait, sandbox, match="'kernels.so' is code that runs as it loads")
    assert "allow_native_code=True" in message
    assert ait.load(ait.Module(mlp(seed=4), "m"), path, allow_native_code=True).backend is not None


def test_an_onnx_model_with_an_epcontext_node_is_code(setup):
    """An EPContext node carries an engine (or its path) that an execution provider loads: code."""
    from onnx import helper

    path, bait, sandbox = setup

    def add_context(model):
        output = model.graph.output[0].name
        model.graph.node.append(helper.make_node("EPContext", [output], [output + "_ctx"], domain="com.microsoft",
                                                 embed_mode=0, ep_cache_context="/tmp/engine.plan"))
        model.graph.output[0].name = output + "_ctx"
    hostile.replace_onnx(path, add_context)
    assert "EPContext" in refused(path, bait, sandbox, match="'model.onnx' is code that runs as it loads")


def test_onnx_sparse_initializer_with_external_data_is_refused(setup):
    from onnx import TensorProto, helper

    path, bait, sandbox = setup

    def add_sparse(model):
        values = helper.make_tensor("sparse_values", TensorProto.FLOAT, [1], [1.0])
        values.ClearField("float_data")
        values.data_location = TensorProto.EXTERNAL
        entry = values.external_data.add()
        entry.key, entry.value = "location", "../../../etc/hostname"
        indices = helper.make_tensor("sparse_indices", TensorProto.INT64, [1], [0])
        model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    hostile.replace_onnx(path, add_sparse)
    assert "sparse_values" in refused(path, bait, sandbox, match="sparse tensor")


@pytest.fixture(scope="module")
def aot_saved(tmp_path_factory):
    """A real AOTInductor package, in a checkpoint this project wrote (compiled once: about a minute)."""
    from aitune_ray.backend import TorchInductorAotBackend

    wrapped = tuned(mlp(), TorchInductorAotBackend(), "m")
    folder = tmp_path_factory.mktemp("aot")
    return ait.save(wrapped, folder / "aot.ait"), ait.save(wrapped, folder / "signed.ait", signing_key=b"k"), wrapped(X)


@pytest.fixture
def aot_setup(aot_saved, tmp_path):
    path = tmp_path / "m.ait"
    shutil.copy(aot_saved[0], path)
    bait, sandbox = Bait(tmp_path), Sandbox(tmp_path)
    yield path, bait, sandbox
    sandbox.close()
    bait.remove()


@pytest.mark.parametrize("attack", sorted(hostile.PACKAGE_ATTACKS))
def test_an_aotinductor_package_is_code_however_it_is_laid_out(aot_setup, attack):
    """No binary in it, and still code: the loader unpickles a use_pickle weight or the sample inputs, or runs
    a compile flags' "compiler" through the shell. Refused untrusted; trusted, the payload really runs."""
    path, bait, sandbox = aot_setup
    marker = path.parent / "code-ran"
    hostile.edit_package(path, lambda members: hostile.PACKAGE_ATTACKS[attack](members, marker))
    message = refused(path, bait, sandbox, match="'model.pt2' is code that runs as it loads")
    assert "AOTInductor package" in message and "allow_native_code=True" in message
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="could not be restored"):   # trusted: the payload is real
        ait.load(ait.Module(mlp(seed=4), "m"), path, allow_native_code=True)
    assert marker.exists()


def test_the_package_this_project_wrote_loads_only_when_trusted(aot_saved, aot_setup):
    path, bait, sandbox = aot_setup
    _, signed, expected = aot_saved
    refused(path, bait, sandbox, match="AOTInductor package")
    for source, trust in ((path, {"allow_native_code": True}), (signed, {"signing_key": b"k"})):
        loaded = ait.load(ait.Module(mlp(seed=4), "m"), source, **trust)
        assert torch.allclose(loaded(X), expected, atol=1e-5)
    refused(signed, bait, sandbox, match="AOTInductor package")   # signed, but loaded without the key


@pytest.mark.parametrize("form", ["encrypted member", "zip64 record naming 2 disks"])
def test_a_damaged_package_fails_as_a_checkpoint_error(aot_saved, aot_setup, form):
    """Refused untrusted without being opened; trusted, what torch's loader raises is a CheckpointError."""
    path, bait, sandbox = aot_setup
    change = hostile.flag_encrypted if form == "encrypted member" else hostile.naming_two_disks
    hostile.replace_artifact(path, change(hostile.part(path, "modules/0/artifacts/model.pt2")), "model.pt2")
    refused(path, bait, sandbox, match="AOTInductor package")
    if form == "encrypted member":   # (torch's loader leaves its aotinductor_* folder behind: trusted code)
        with pytest.raises(CheckpointError, match="could not be restored"):
            ait.load(ait.Module(mlp(seed=4), "m"), path, allow_native_code=True)
    else:   # torch's zip reader reads past the disk count
        assert torch.allclose(ait.load(ait.Module(mlp(seed=4), "m"), path, allow_native_code=True)(X),
                              aot_saved[2], atol=1e-5)


# ----- configs that name a program, a library or a folder ---------------------------------------------------

def _inductor_jit(options: dict) -> dict:
    from aitune_ray.backend import TorchInductorJitBackend
    from aitune_ray.records.imports import class_path

    return {"type": class_path(TorchInductorJitBackend), "config": {"options": options}}


def test_a_config_choosing_the_compiler_is_refused(setup):
    path, bait, sandbox = setup
    marker = path.parent / "compiler-ran"
    compiler = path.parent / "cxx.sh"
    compiler.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    compiler.chmod(0o755)
    hostile.backend_spec(path, _inductor_jit({"cpp.cxx": [str(compiler)]}))
    message = refused(path, bait, sandbox, match="options\\['cpp.cxx'\\]")
    assert "allow_native_code=True" in message and not marker.exists()


@pytest.mark.parametrize("options", [{"max_autotune": "yes"}, {"max_fusion_size": [64] * 1000},
                                     {"cpp.threads": True}, {"max_autotune_gemm_backends": {"x": "ATEN"}},
                                     {"max_autotune_gemm_backends": "ATEN" * 100}, {"triton.max_tiles": 2.5}])
def test_an_allowed_inductor_option_of_the_wrong_type_is_refused(setup, options):
    path, bait, sandbox = setup
    hostile.backend_spec(path, _inductor_jit(options))
    (key,) = options
    refused(path, bait, sandbox, match=f"options\\[{key!r}\\]".replace(".", "\\."))


def test_allowed_inductor_options_of_their_own_types_pass_the_check():
    from aitune_ray.backend import TorchInductorJitBackend, TorchInductorJitBackendConfig
    from aitune_ray.checkpoint.config_check import unsafe_field

    config = TorchInductorJitBackendConfig(options={"max_autotune": True, "max_fusion_size": 32, "cpp.simdlen": None,
                                                    "max_autotune_gemm_backends": "ATEN,TRITON"})
    assert unsafe_field(TorchInductorJitBackend(config).config) is None


def test_a_config_choosing_a_folder_to_write_is_refused(setup):
    path, bait, sandbox = setup
    folder = path.parent / "trace"
    hostile.backend_spec(path, _inductor_jit({"trace.enabled": True, "trace.debug_dir": str(folder)}))
    refused(path, bait, sandbox, match="options\\['trace\\.")
    assert not folder.exists()


def test_a_tensorrt_plugin_library_in_provider_options_is_refused(setup, tmp_path):
    """Refused at the config check, before ONNX Runtime (no TensorRT needed)."""
    path, bait, sandbox = setup
    marker = tmp_path / "library-loaded"
    library = _shared_library(tmp_path, marker) or tmp_path / "libplugin.so"
    spec = hostile.manifest_of(path)["modules"][0]["backend"]
    spec["config"].update(execution_provider="TensorrtExecutionProvider",
                          provider_options={"tensorrt": {"trt_extra_plugin_lib_paths": str(library)}})
    hostile.backend_spec(path, spec)
    edit_manifest(path, lambda m: m["modules"][0].update(is_jit=False))
    refused(path, bait, sandbox, match="trt_extra_plugin_lib_paths")
    assert not marker.exists()


@pytest.mark.parametrize("config", [
    "TorchTensorRTAotBackendConfig(compile_config=TorchTensorRTConfig(options={'engine_cache_dir': '/x'}))",
    "TorchTensorRTJitBackendConfig(compile_config=TorchTensorRTConfig(timing_cache_path='/x/cache'))",
    "TensorRTBackendConfig(timing_cache='/x/timing.cache')",
    "ONNXRuntimeBackendConfig(provider_options={'tensorrt': {'trt_dump_subgraphs': True}})",
    "TorchInductorAotBackendConfig(inductor_configs={'aot_inductor.output_path': '/x'})",
    "TorchInductorJitBackendConfig(options={'debug_dir': '/x'})",
])
def test_every_config_field_naming_a_path_is_refused_unless_trusted(config):
    from aitune_ray import backend as b
    from aitune_ray.checkpoint.config_check import check_configs

    made = eval(config, dict(vars(b)))   # noqa: S307 - the literal configs above
    owner = next(c for c in vars(b).values() if isinstance(c, type) and getattr(c, "config_class", None) is type(made))
    with pytest.raises(CheckpointError, match="not among the settings a checkpoint may choose"):
        check_configs("m", owner(made), trusted=False)
    check_configs("m", owner(made), trusted=True)
    defaults = owner(type(made)())
    check_configs("m", defaults, trusted=False)


def test_every_built_in_config_declares_what_a_checkpoint_may_set():
    """The allow-list is declared next to each config, and names only fields the config has."""
    import dataclasses

    from aitune_ray import backend as b

    configs = [c for c in vars(b).values() if isinstance(c, type) and issubclass(c, b.BackendConfig)
               and c is not b.BackendConfig]
    assert len(configs) >= 12
    for config in configs:
        assert config.safe_fields is not None, config.__name__
        assert set(config.safe_fields) <= {f.name for f in dataclasses.fields(config)}, config.__name__


# ----- weights --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.bool, torch.float8_e4m3fn])
def test_weights_of_another_dtype_are_refused_not_cast(setup, dtype):
    path, bait, sandbox = setup
    hostile.with_weights_of_dtype(path, dtype)
    message = refused(path, bait, sandbox, match="never casts")
    assert str(dtype).replace("torch.", "") in message


# ----- archives that would write more than they hold, and paths that are not files -----------------------------

def within(seconds: float, work):
    """work() run in a thread that must finish within seconds (a hang fails the test instead of hanging it)."""
    import threading

    outcome = {}

    def run():
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: it hangs"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def test_overlapping_members_are_refused_before_anything_is_extracted(setup):
    """A quoted-overlap zip written with struct: 40 artifacts whose bytes overlap, each listed with its true size
    and SHA-256. Every member passes the ratio rule, yet extracting them all would write 38 times the file."""
    path, bait, sandbox = setup
    total = hostile.with_overlapping_parts(path)
    assert total > 30 * path.stat().st_size
    refused(path, bait, sandbox, match="overlaps member")


def test_an_archive_never_writes_more_than_its_members_hold(saved, tmp_path):
    from aitune_ray.checkpoint.reader import CheckpointArchive

    with CheckpointArchive(saved[0]) as archive:
        part = archive.manifest()["modules"][0]["weights"]
        archive.extract(part, tmp_path / "first")
        archive.extract(archive.manifest()["modules"][0]["artifacts"]["model.onnx"], tmp_path / "second")
        with pytest.raises(CheckpointError, match="more than the"):
            archive.extract(part, tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_a_member_name_with_a_nul_is_refused_not_cut_short(setup):
    """zipfile cuts a name at its first NUL: 'model.onnx\\0.so' would be read as 'model.onnx'."""
    path, bait, sandbox = setup
    hostile.rebuilt(path, rename={"modules/0/artifacts/model.onnx": b"modules/0/artifacts/model.onnx\x00.so"})
    refused(path, bait, sandbox, match="NUL")


def test_names_ending_in_a_newline_are_not_plain(setup):
    path, bait, sandbox = setup

    def rename(m):
        part = m["modules"][0]["artifacts"].pop("model.onnx")
        m["modules"][0]["artifacts"]["model.onnx\n"] = dict(part, member="modules/0/artifacts/model.onnx\n")
    hostile.rebuilt(path, rename, rename={"modules/0/artifacts/model.onnx": b"modules/0/artifacts/model.onnx\n"})
    refused(path, bait, sandbox, match="not a plain")
    from aitune_ray.checkpoint import format as fmt

    assert not fmt.is_plain_member("modules/0/weights.safetensors\n")
    with pytest.raises(CheckpointError, match="plain file name"):
        fmt.check_artifact_name("model.onnx\n", "m")


def test_a_zip64_offset_beyond_the_file_is_one_error_line(setup, capsys):
    from aitune_ray.command.cli import main

    path, bait, sandbox = setup
    hostile.rebuilt(path, offsets={"modules/0/weights.safetensors": 2 ** 64 - 1})
    refused(path, bait, sandbox, match="beyond the file")
    assert main(["inspect", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("error: ") and "beyond the file" in err, err
    assert "Traceback" not in out + err


def test_a_fifo_or_a_device_at_the_checkpoint_path_is_refused_without_hanging(tmp_path):
    from aitune_ray.checkpoint.inspection import inspect_checkpoint

    fifo, zero = tmp_path / "fifo.ait", tmp_path / "zero.ait"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "FIFO"), (zero, "character device")):
        fresh = ait.Module(mlp(seed=4), "m")
        before = snapshot(fresh.module)
        with pytest.raises(CheckpointError, match=kind):
            within(30, lambda: ait.load(fresh, path))
        assert hostile.same_state(fresh.module, before)
        with pytest.raises(CheckpointError, match=kind):
            within(30, lambda: inspect_checkpoint(path))


# ----- module paths that name what cannot be replaced ------------------------------------------------------------

class _ReadOnly:
    """A pipeline whose module is a property without a setter."""

    def __init__(self):
        self._a = mlp(seed=5)

    @property
    def a(self):
        return self._a


class _InTuple:
    def __init__(self):
        self.blocks = (mlp(seed=5),)


class _Picky:
    """Takes back its own Sequential, refuses anything else (a wrapper) at attribute 'a'."""

    def __init__(self):
        object.__setattr__(self, "a", mlp(seed=5))

    def __setattr__(self, name, value):
        if type(value) is not torch.nn.Sequential:   # a wrapper says its __class__ is the module's
            raise AttributeError(f"{name} must stay a Sequential")
        object.__setattr__(self, name, value)


def _inner(obj):
    return obj._a if isinstance(obj, _ReadOnly) else obj.blocks[0] if isinstance(obj, _InTuple) else obj.a


@pytest.mark.parametrize("holder, path", [(_ReadOnly, "a"), (_InTuple, "blocks.0"), (_Picky, "a")])
def test_a_module_path_naming_what_cannot_be_replaced_is_refused_and_changes_nothing(tmp_path, holder, path):
    class Pipe:
        def __init__(self):
            self.a = tuned(mlp(0), TorchEagerBackend(), "a")

    saved = ait.save(Pipe(), tmp_path / "p.ait")
    edit_manifest(saved, lambda m: (m["modules"][0].update(path=path), m.update(module_names=[path])))
    sandbox = Sandbox(tmp_path)
    try:
        target = holder()
        before, leftovers = snapshot(_inner(target)), sandbox.leftovers()
        with pytest.raises(CheckpointError) as err:
            ait.load(target, saved)
        assert "\n" not in str(err.value)
        assert hostile.same_state(_inner(target), before), "the user's weights were replaced"
        assert type(_inner(target)) is torch.nn.Sequential
        assert sandbox.leftovers() == leftovers, "the load's temporary folder was left behind"
    finally:
        sandbox.close()


# ----- what save writes, beside files another user planted ----------------------------------------------------

def test_a_fifo_named_like_a_stale_temporary_file_does_not_hang_save(tmp_path):
    target = tmp_path / "m.ait"
    fifo = tmp_path / ".m.ait.0123456789ab.tmp"   # the name of a killed save's temporary file
    os.mkfifo(fifo)
    wrapped = tuned(mlp(), TorchEagerBackend(), "m")
    assert within(60, lambda: ait.save(wrapped, target)) == target
    assert fifo.exists(), "a FIFO is not a temporary file of a save: it is left alone"
    fresh = ait.Module(mlp(seed=4), "m")
    ait.load(fresh, target)
    assert torch.equal(fresh(X), wrapped(X))


def test_save_replaces_a_symlink_planted_at_its_path_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own file\n")
    target = tmp_path / "m.ait"
    target.symlink_to(victim)
    ait.save(tuned(mlp(), TorchEagerBackend(), "m"), target)
    assert victim.read_text() == "the victim's own file\n"
    assert not target.is_symlink() and target.stat().st_size > 1000


def test_a_checkpoint_this_run_wrote_that_became_a_fifo_is_refused_without_hanging(tmp_path):
    from aitune_ray.checkpoint.own import OwnCheckpoint

    wrapped = tuned(mlp(), TorchEagerBackend(), "m")
    own = OwnCheckpoint(tmp_path / "m.ait")
    own.save(wrapped)
    own.path.unlink()
    os.mkfifo(own.path)

    def load_back():
        with own.load(ait.Module(mlp(seed=4), "m")):
            pass
    with pytest.raises(CheckpointError, match="FIFO"):
        within(30, load_back)
