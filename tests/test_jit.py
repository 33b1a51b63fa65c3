"""Just-in-time tuning (aitune_ray.jit): recording until min_samples, tuning in the background while calls run
eagerly, the switch at a call boundary, the blocking mode, top-down fallback to children, the decision cache,
the config's filters, deferred mode and INSPECT's report. Builds are in-process and wait on Events, no sleeps."""

from __future__ import annotations

import dataclasses
import json
import threading
import tomllib
from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_ray as ait
from aitune_ray.backend import Backend, BackendConfig
from aitune_ray.jit import registry
from aitune_ray.jit.config import JITMode, config as jit_config
from aitune_ray.jit.patched import ModuleState
from aitune_ray.jit.patcher import Patcher, jit_reset
from aitune_ray.jit.tune import deferred, wait
from tests.helpers import FAST_MEASURE
from tests.jit_helpers import jit_tuning, one_backend

REPO = Path(__file__).resolve().parents[1]
EVENTS = {"started": threading.Event(), "release": threading.Event()}
COUNTS = {"build": 0, "infer": 0, "load": 0}
BUILD_THREADS: list[str] = []
WAIT_S = 120


@dataclasses.dataclass
class GateConfig(BackendConfig):
    block: bool = False   # the build waits for EVENTS["release"]


class GateBackend(Backend):
    """Computes Affine's x * weight + bias without its eager cost; its build may wait on an Event."""

    config_class = GateConfig
    is_jit = False   # a checkpoint loads it (_load) rather than building it again

    def _build(self, module, samples, device, workdir) -> None:
        COUNTS["build"] += 1
        BUILD_THREADS.append(threading.current_thread().name)
        EVENTS["started"].set()
        if self.config.block:
            assert EVENTS["release"].wait(WAIT_S)
        self._weight, self._bias = module.weight.detach(), module.bias.detach()
        self._file = Path(workdir) / "gate.txt"
        self._file.write_text("affine")

    def _artifacts(self) -> dict[str, Path]:
        return {"gate": self._file}

    def _load(self, module, state, artifacts, device) -> None:
        COUNTS["load"] += 1
        self._weight, self._bias = module.weight.detach(), module.bias.detach()

    def _infer(self, x):
        COUNTS["infer"] += 1
        return x * self._weight + self._bias


class Affine(nn.Module):
    """x * weight + bias, through a chain of no-op work in eager."""

    def __init__(self, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(3, generator=gen))
        self.bias = nn.Parameter(torch.randn(3, generator=gen))
        self.calls = 0

    def forward(self, x):
        if threading.current_thread() is threading.main_thread():   # the program's calls, not the tuner's
            self.calls += 1
        for _ in range(20):
            x = x + 0.0
        return x * self.weight + self.bias


class Breaks(nn.Module):
    """Two Affine children; its own forward breaks torch.compile's graph."""

    def __init__(self):
        super().__init__()
        self.first, self.second = Affine(1), Affine(2)

    def forward(self, x):
        x = self.first(x)
        torch._dynamo.graph_break()
        return self.second(x)


def gate(block: bool = False):
    return one_backend(GateBackend(GateConfig(block=block)), FAST_MEASURE)


@pytest.fixture(autouse=True)
def jit(tmp_path):
    # InlineExecutor(0): no confirm session, the verdict is the build's
    with jit_tuning(gate(), ait.InlineExecutor(0), tmp_path / "cache") as config:
        for event in EVENTS.values():
            event.clear()
        COUNTS.update(build=0, infer=0, load=0)
        BUILD_THREADS.clear()
        yield config
        EVENTS["release"].set()   # a build a failed test left waiting finishes
        if Patcher.tuner is not None:
            assert Patcher.tuner.wait(WAIT_S)


def first_run(x) -> None:
    """A blocking run that tunes one Affine on x, leaving its decision in the cache."""
    jit_config.blocking = True
    Patcher.patch_torch()
    Affine()(x)


def next_run() -> None:
    """The same program run again: nothing tracked, torch patched again, the counts at zero (the config and
    the decision cache stay)."""
    jit_reset()
    Patcher.patch_torch()
    COUNTS.update(build=0, infer=0, load=0)


def tracked(module) -> "ait.jit.patched.PatchedModule":
    return next(m for m in registry.modules if m.__wrapped__ is module)


def test_calls_run_eagerly_while_the_build_waits_and_switch_after_it():
    jit_config.strategy = gate(block=True)
    Patcher.patch_torch()
    model = Affine()
    x = torch.randn(4, 3)
    expected = x * model.weight + model.bias
    model(x)                                  # recorded; tuning starts on the tuner's thread
    assert EVENTS["started"].wait(WAIT_S)     # the build is running, and blocked
    for _ in range(5):                        # the program goes on, eagerly
        torch.testing.assert_close(model(x), expected)
    assert model.calls == 6 and COUNTS["infer"] == 0
    assert tracked(model).state is ModuleState.TUNING
    EVENTS["release"].set()
    assert wait(WAIT_S)
    assert BUILD_THREADS == ["aitune-ray-jit"]
    infers, eager_calls = COUNTS["infer"], model.calls
    torch.testing.assert_close(model(x), expected)   # the next call takes the verdict, on entry
    assert COUNTS["infer"] == infers + 1 and model.calls == eager_calls
    assert tracked(model).state is ModuleState.TUNED
    assert tracked(model).switched_at_call == 7


def test_blocking_mode_tunes_on_the_calling_thread():
    jit_config.blocking = True
    Patcher.patch_torch()
    model = Affine()
    x = torch.randn(2, 3)
    model(x)
    assert BUILD_THREADS == [threading.current_thread().name]
    infers = COUNTS["infer"]
    torch.testing.assert_close(model(x), x * model.weight + model.bias)
    assert COUNTS["infer"] == infers + 1


def test_min_samples_and_batch_axis_wait_for_two_batch_sizes():
    jit_config.blocking, jit_config.min_samples = True, 3
    Patcher.patch_torch()
    model = Affine()
    for _ in range(4):
        model(torch.randn(2, 3))
    assert COUNTS["build"] == 0 and tracked(model).state is ModuleState.RECORDING
    model(torch.randn(5, 3))
    assert COUNTS["build"] == 1 and tracked(model).state is ModuleState.TUNED
    assert tracked(model).samples.batch_sizes() == [2, 5]


def test_the_next_run_starts_tuned_from_the_cache_and_a_changed_module_misses_it():
    x = torch.randn(4, 3)
    first_run(x)
    assert COUNTS["build"] == 1
    decision = json.loads(next((jit_config.cache_dir).glob("*/decision.json")).read_text())
    assert decision["verdict"] == "tuned"

    next_run()
    model = Affine()
    torch.testing.assert_close(model(x), x * model.weight + model.bias)
    assert COUNTS["build"] == 0 and Patcher.tuner.builds == 0 and COUNTS["load"] == 1
    assert COUNTS["infer"] == 1 and model.calls == 0   # tuned from its first call
    assert tracked(model).info.startswith("cached")

    changed = Affine(seed=7)                      # other weights: another fingerprint
    changed(x)
    assert COUNTS["build"] == 1
    other = torch.randn(6, 3)                     # a call signature never tuned on misses too
    jit_reset()
    Patcher.patch_torch()
    Affine()(other)
    assert COUNTS["build"] == 2


def test_a_graph_break_leaves_the_parent_eager_and_its_children_are_tuned():
    jit_config.blocking, jit_config.detect_graph_breaks, jit_config.max_depth_level = True, True, 2
    Patcher.patch_torch()
    model = Breaks()
    x = torch.randn(4, 3)
    first, second = model.first, model.second
    expected = (x * first.weight + first.bias) * second.weight + second.bias
    model(x)
    parent = tracked(model)
    assert parent.state is ModuleState.EAGER and parent.info.startswith("graph break")
    infers = COUNTS["infer"]
    torch.testing.assert_close(model(x), expected)   # each child takes its verdict on entry
    assert COUNTS["infer"] == infers + 2
    assert [c.state for c in parent.children] == [ModuleState.TUNED, ModuleState.TUNED]


def test_skip_modules_min_parameters_and_patch_exclude():
    jit_config.blocking, jit_config.max_depth_level = True, 2
    jit_config.skip_modules = ["Breaks"]
    jit_config.patch_exclude = (f"{__name__}.Affine",)
    Patcher.patch_torch()
    skipped, excluded, small = Breaks(), Affine(), nn.Linear(1, 1)
    skipped(torch.randn(2, 3))
    excluded(torch.randn(2, 3))
    jit_config.min_parameters = 2
    small(torch.randn(2, 1))
    assert tracked(skipped).state is ModuleState.SKIPPED
    assert all(m.__wrapped__ is not excluded for m in registry.modules)
    assert tracked(small).state is ModuleState.SKIPPED and small not in [m.__wrapped__ for m in registry.heads]
    assert COUNTS["build"] == 0


def test_deferred_mode_tunes_after_the_marker():
    jit_config.mode, jit_config.blocking = JITMode.TUNE_DEFERRED, True
    Patcher.patch_torch()
    model = Affine()
    x = torch.randn(4, 3)
    for _ in range(3):
        model(x)
    assert COUNTS["build"] == 0
    deferred()
    model(x)
    assert COUNTS["build"] == 1 and tracked(model).state is ModuleState.TUNED


def test_deferred_outside_deferred_mode_is_refused():
    with pytest.raises(ait.AITuneRayError, match="TUNE_DEFERRED"):
        deferred()


def test_inspect_mode_reports_calls_and_tunes_nothing(tmp_path):
    jit_config.mode, jit_config.max_depth_level = JITMode.INSPECT, 3
    Patcher.patch_torch()
    from aitune_ray.jit.inspection import save_report

    model = Breaks()
    for _ in range(2):
        model(torch.randn(2, 3))
    report = json.loads(save_report(tmp_path / "r.json", "breaks").read_text())
    names = [m["module"] for m in report["modules"]]
    assert names == ["Breaks", "Breaks.Affine", "Breaks.Affine.1"]
    assert [m["calls"] for m in report["modules"]] == [2, 2, 2]
    assert report["modules"][0]["inputs"][0]["args"]["seq"][0]["tensor"] == [2, 3]
    page = save_report(tmp_path / "r.html", "<b>").read_text()
    assert "&lt;b&gt;" in page and COUNTS["build"] == 0


def test_the_autowrapt_entry_point_names_the_enabling_function():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["aitune_ray_enable_jit_tuning"]["torch"]
    assert target == "aitune_ray.jit.enable:wrapt_auto_enable"
    import aitune_ray.jit.enable as enable

    enable.wrapt_auto_enable(None)
    assert torch.nn.Module.__call__ is not Patcher.original_call and Patcher.original_init is not None


def test_a_damaged_cached_checkpoint_is_a_miss_and_the_module_is_tuned_again():
    x = torch.randn(4, 3)
    first_run(x)
    (saved,) = jit_config.cache_dir.glob("*/module.ait")
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0xFF
    saved.write_bytes(bytes(data))

    next_run()
    model = Affine()
    torch.testing.assert_close(model(x), x * model.weight + model.bias)
    assert COUNTS["load"] == 0 and Patcher.tuner.builds == 1 and tracked(model).state is ModuleState.TUNED


def test_a_backend_that_calls_the_module_itself_reaches_its_forward():
    """TorchEagerBackend (as Inductor's compiled module) calls the tuned module: that call runs as written."""
    jit_config.blocking = True
    jit_config.strategy = one_backend(ait.backend.TorchEagerBackend(), FAST_MEASURE)
    Patcher.patch_torch()
    model = Affine()
    x = torch.randn(4, 3)
    model(x)
    calls = model.calls
    torch.testing.assert_close(model(x), x * model.weight + model.bias)
    assert tracked(model).state is ModuleState.TUNED and model.calls == calls + 1


def test_patch_for_jit_tuning_tracks_the_modules_made_inside_and_disable_stops_tracking():
    from aitune_ray.jit.patcher import patch_for_jit_tuning

    made = patch_for_jit_tuning(lambda: Affine())()
    after = Affine()
    assert [m.__wrapped__ for m in registry.modules] == [made]
    Patcher.patch_torch()
    import importlib
    import sys

    sys.modules.pop("aitune_ray.jit.disable", None)
    importlib.import_module("aitune_ray.jit.disable")
    later = Affine()
    assert all(m.__wrapped__ not in (after, later) for m in registry.modules)
