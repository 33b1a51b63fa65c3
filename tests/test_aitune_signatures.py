"""AITune's loud items: save/load by AITune's keywords and in its positional order, load's
disable_external_logging, and TuningReport.to_dict() (the replacement for snapshot_tuning_data) with every
failure kind, a missing library included."""

import inspect
import json
import logging

import pytest
import torch

import aitune_ray as ait
from aitune_ray.backend.backend import require
from aitune_ray.errors import MissingDependencyError
from tests.helpers import (FAST_MEASURE, FailingBackend, FastBackend, SleepyAffine, SlowBackend, WrongBackend,  # noqa: F401
                           _HelperBackend, fresh_counters, helper)


class NeedsALibrary(_HelperBackend):
    """Builds only where a library that is not installed is."""

    def _build(self, module, samples, device, workdir):
        require("a_library_that_is_not_installed_here", "nothing", "NeedsALibrary")


def tuned(tmp_path):
    strategy = ait.OneBackendStrategy(helper(FastBackend, "f"), measure_config=FAST_MEASURE)
    module = ait.Module(SleepyAffine(0.0), name="affine", strategy=strategy.enable_performance_validation(False))
    module(torch.ones(2, 3))
    module.tune(device="cpu")
    return module


def test_save_and_load_by_aitunes_keywords_and_positional_order(tmp_path):
    module = tuned(tmp_path)
    storage = ait.LocalTorchStorage(base_folder=str(tmp_path / "ckpt"))
    ait.save(module=module, path="m.ait", storage=storage)
    assert (tmp_path / "ckpt" / "m.ait").is_file()
    fresh = ait.Module(SleepyAffine(0.0), name="affine")
    assert ait.load(module=fresh, path="m.ait", storage=storage) is fresh and fresh.state == ait.ModuleState.TUNED
    other = ait.Module(SleepyAffine(0.0), name="affine")
    ait.load(other, "m.ait", storage, {"": "cpu"}, False)          # storage, device_map, disable_external_logging
    assert other.state == ait.ModuleState.TUNED


def test_load_quiets_the_libraries_loggers_while_loading_by_default(tmp_path, monkeypatch):
    module = tuned(tmp_path)
    path = ait.save(module, tmp_path / "m.ait")
    import aitune_ray.checkpoint as checkpoint

    seen, real = [], checkpoint.load_checkpoint

    def watching(*args, **kwargs):
        seen.append(logging.getLogger("torch").level)
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "load_checkpoint", watching)
    ait.load(ait.Module(SleepyAffine(0.0), name="affine"), path)
    ait.load(ait.Module(SleepyAffine(0.0), name="affine"), path, disable_external_logging=False)
    assert seen[0] == logging.ERROR and seen[1] != logging.ERROR


def test_tuning_report_to_dict_holds_every_failure_kind_as_plain_json():
    backends = [NeedsALibrary(), helper(FailingBackend, "bad"), helper(WrongBackend, "wrong", offset=1.0),
                helper(SlowBackend, "slow", delay_s=0.02)]
    module = ait.Module(SleepyAffine(0.0), name="affine",
                        strategy=ait.MaxThroughputStrategy(backends, measure_config=FAST_MEASURE))
    report = ait.tune(module, [torch.ones(3) for _ in range(2)], batch_sizes=[2], device="cpu")
    (result,) = [r for r in report.modules[0].results if r.backend == "NeedsALibrary"]
    assert isinstance(result.exception, MissingDependencyError)
    data = json.loads(json.dumps(report.to_dict()))
    statuses = {r["backend"]: r["status"] for r in data["modules"][0]["results"]}
    assert set(statuses) == {"NeedsALibrary", "FailingBackend", "WrongBackend", "SlowBackend"}
    assert "a_library_that_is_not_installed_here" in json.dumps(data)


def test_strategy_to_json_dict_describe_clone_sink_and_profiling_config():
    lines = []
    strategy = ait.MaxThroughputStrategy([helper(FastBackend, "f")], measure_config=FAST_MEASURE, sink=lines.append)
    data = json.loads(json.dumps(strategy.to_json_dict()))
    assert data["strategy"] == "MaxThroughputStrategy" and len(data["backends"]) == 1
    assert "FastBackend" in strategy.describe()
    twin = strategy.clone()
    assert twin is not strategy and twin.backends[0] is not strategy.backends[0]
    assert twin.to_json_dict() == strategy.to_json_dict()
    module = ait.Module(SleepyAffine(0.0), name="affine", strategy=strategy)
    module(torch.ones(2, 3))
    module.tune(device="cpu")
    assert lines and lines[-1].startswith("[affine] ")
    with pytest.raises(ait.AITuneRayError, match="measure_config=") as refused:
        ait.MaxThroughputStrategy(profiling_config=object())
    assert isinstance(refused.value, ValueError)


def test_module_device_cache_dir_and_graph_specs():
    module = ait.Module(SleepyAffine(0.0), name="affine")
    assert module.device == torch.device("cpu")
    with pytest.raises(ait.AITuneRayError, match="run_dir="):
        module.cache_dir
    with pytest.raises(ait.AITuneRayError, match="samples.batch_sizes"):
        module.graph_specs


def test_backend_to_dict_and_from_dict_round_trip_a_built_backend(tmp_path):
    from aitune_ray.backend import Backend

    module = tuned(tmp_path)
    data = json.loads(json.dumps(module.backend.to_dict()))
    assert data["state"] == module.backend.export()[0] and data["device"] == "cpu"
    again = Backend.from_dict(module.module, data, workdir=tmp_path / "again")
    assert type(again) is FastBackend and torch.equal(again(torch.ones(2, 3)), module(torch.ones(2, 3)))
    unbuilt = Backend.from_dict(None, helper(FastBackend, "u").to_dict())
    assert unbuilt.config.tag == "u"


def test_positional_arguments_in_aitunes_order_and_its_spellings():
    from aitune_ray.backend import (TensorRTBackendConfig, TorchInductorJitBackendConfig,
                                    TorchTensorRTAotBackendConfig, TorchTensorRTConfig)

    jit = TorchInductorJitBackendConfig(True, False, "max-autotune")    # fullgraph, dynamic, mode
    assert (jit.fullgraph, jit.dynamic, jit.mode) == (True, False, "max-autotune")
    names = list(inspect.signature(TensorRTBackendConfig).parameters)
    assert names.index("device") == names.index("profiles") + 1
    fp16 = TorchTensorRTConfig(enabled_precisions={torch.float16})   # as AITune's README writes it
    assert fp16.enabled_precisions == ["float16"] and fp16.use_explicit_typing is False
    assert TorchTensorRTConfig().use_explicit_typing is True
    with pytest.raises(ait.AITuneRayError, match="never holds a pickle"):
        TorchTensorRTAotBackendConfig(pickle_protocol=5)


def test_errors_are_the_builtin_classes_aitune_raises():
    from aitune_ray.errors import BuildError, CorrectnessError, RecordingError

    module = ait.Module(SleepyAffine(0.0), name="affine")
    with pytest.raises(RuntimeError, match="not tuned"):      # AITune: RuntimeError
        module.activate()
    with pytest.raises(ValueError, match="no recorded samples"):   # AITune: ValueError
        module.tune(device="cpu")
    assert issubclass(RecordingError, ValueError)
    assert issubclass(BuildError, RuntimeError) and issubclass(CorrectnessError, RuntimeError)
