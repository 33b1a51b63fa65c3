"""All 132 of AITune 0.6.0's module paths import under aitune_ray, each with AITune's public names (or the
name listed as absent, with why): aitune_modules.json is AITune's list, read from its wheel by
make_module_list.py; aitune_ray/aitune_paths.py is the alias table it is checked against."""

import importlib
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import aitune_ray
from aitune_ray import aitune_paths
from aitune_ray.errors import AbsentNameError
from aitune_ray.jit.patcher import jit_reset
from tests.aitune import make_module_list

MODULES = json.loads(make_module_list.OUT.read_text())


@pytest.fixture(autouse=True)
def no_jit_afterwards():
    """Importing aitune_ray.jit.enable turns JIT tuning on for the whole process, as AITune's does: each test
    here leaves it off again, so that no later test's modules are tracked (and kept alive) by it."""
    yield
    jit_reset()


def _local(dotted: str) -> str:
    return dotted.removeprefix("aitune.torch").lstrip(".")


def _here(dotted: str) -> str:
    local = _local(dotted)
    return "aitune_ray" + ("." + local if local else "")


def test_the_list_holds_all_132_of_aitunes_module_paths_and_their_names():
    assert len(MODULES) == 132
    assert MODULES["aitune.torch.backend.tensorrt"] == sorted(
        ["TensorRTBackend", "TensorRTBackendConfig", "TensorRTProfile", "ProfileMode", "ONNXAutoCastConfig",
         "ONNXQuantizationConfig", "TorchQuantizationConfig"])
    assert "samples_generator" in MODULES["aitune.torch.dataloader"]


def _aitune_root() -> Path | None:
    spec = importlib.util.find_spec("aitune")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / "torch" / "__init__.py").is_file():
            return Path(folder).parent
    return None


@pytest.mark.skipif(_aitune_root() is None, reason="AITune is not installed here")
def test_the_list_is_what_the_script_reads_from_an_installed_aitune():
    assert make_module_list.module_list(_aitune_root()) == MODULES


@pytest.mark.parametrize("dotted", sorted(MODULES))
def test_each_aitune_module_path_imports_with_its_names(dotted):
    module = importlib.import_module(_here(dotted))
    absent = aitune_paths.absent_names(_local(dotted))
    missing = [n for n in MODULES[dotted] if n not in absent and not hasattr(module, n)]
    assert missing == [], f"{_here(dotted)} lacks AITune's {missing} (map them or list them in ABSENT)"
    present = [n for n in absent if n in vars(module)]
    assert present == [], f"{_here(dotted)} has {present}, listed as absent: drop them from ABSENT"


def test_the_table_names_only_aitunes_paths_and_names_and_a_name_once():
    for local in set(aitune_paths.ALIASES) | set(aitune_paths.ABSENT):
        dotted = "aitune.torch" + ("." + local if local else "")
        if local in ("utils", "tune_data"):     # AITune's namespace packages, parents of listed paths
            assert any(name.startswith(dotted + ".") for name in MODULES)
            continue
        assert dotted in MODULES, local
        given, absent = set(aitune_paths.alias_names(local)), set(aitune_paths.absent_names(local))
        assert given <= set(MODULES[dotted]), (local, given - set(MODULES[dotted]))
        assert absent <= set(MODULES[dotted]), (local, absent - set(MODULES[dotted]))
        assert not given & absent, local


def test_a_path_with_a_module_of_its_own_here_is_not_also_in_the_alias_table():
    for local in aitune_paths.ALIASES:
        spec = importlib.util.find_spec(f"aitune_ray.{local}")
        assert isinstance(spec.loader, aitune_paths._AliasLoader), f"aitune_ray.{local} is a module: drop its alias"


def test_an_alias_module_gives_the_same_objects_and_an_absent_name_says_why():
    from aitune_ray.backend.tensorrt import TensorRTBackend, TensorRTProfile
    from aitune_ray.tune_strategy.performance_validation import PerformanceValidationMode

    assert TensorRTBackend is aitune_ray.backend.TensorRTBackend
    assert TensorRTProfile is aitune_ray.backend.TensorRTProfile
    assert PerformanceValidationMode is aitune_ray.PerformanceValidationMode
    tensorrt = importlib.import_module("aitune_ray.backend.tensorrt")
    assert isinstance(tensorrt, types.ModuleType) and tensorrt.__path__ == []
    assert "TensorRTBackend" in tensorrt.__all__ and "ONNXQuantizationConfig" not in tensorrt.__all__
    with pytest.raises(AbsentNameError, match="ModelOpt INT8/FP8 quantization for TensorRT is not wired"):
        from aitune_ray.backend.tensorrt import ONNXQuantizationConfig  # noqa: F401
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        tensorrt.Nothing


def test_the_docs_section_is_generated_from_the_table():
    text = make_module_list.DOCS.read_text()
    assert make_module_list.splice(text, make_module_list.docs_section()) == text


FRESH = """
import sys, types
import aitune_ray
import aitune_ray.performance.profile
import aitune_ray.config
import aitune_ray.tune_strategy.performance_validation
from aitune_ray.backend.tensorrt.tensorrt_backend import TensorRTBackend
from aitune_ray.dataloader import DynamicShapeDataset, InputConfig, MinMaxRandomDataset, samples_generator
from aitune_ray.performance import profile
assert not isinstance(profile, types.ModuleType), profile            # the function, as in AITune
assert not isinstance(aitune_ray.config, types.ModuleType)
profile_module, config_module = sys.modules["aitune_ray.performance.profile"], sys.modules["aitune_ray.config"]
assert profile_module.profile is profile and config_module.config is aitune_ray.config
assert sys.modules["aitune_ray.backend.tensorrt"].__name__ == "aitune_ray.backend.tensorrt"
print("ok")
"""


def test_in_a_fresh_process_the_paths_import_and_leave_their_parents_names_alone():
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
