"""The command's failures before any work and its own checkpoint: one line and an exit code instead of a
traceback, nothing locked for the corrected job, and a run's own AOT checkpoint trusted by that run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from aitune_ray.command.cli import EXIT_BAD_JOB, EXIT_FAILED, EXIT_OK, main
from tests.test_cli import FAST_MEASURE, eager_job, write_job

FACTORIES = '''
import torch

from examples.mlp.model import make_data, make_model


def raising_model(**kwargs):
    raise RuntimeError("weights.bin not found")


def empty_data(**kwargs):
    return []


def wrong_width_data(**kwargs):
    return [torch.randn(4, 3)]
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "user_factories.py").write_text(textwrap.dedent(FACTORIES))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def quick_job(tmp_path: Path, **changes) -> dict:
    data = eager_job(tmp_path, model="user_factories:make_model", data="user_factories:make_data",
                     model_args={"blocks": 1, "width": 64}, data_args={"batch_sizes": [4], "per_batch_size": 2},
                     executor={"type": "inline", "contain": False})
    data.update(changes)
    return data


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("change, says, code", [
    ({"model": "user_factories:raising_model"}, "model: user_factories:raising_model raised RuntimeError: "
                                                "weights.bin not found", EXIT_BAD_JOB),
    ({"data": "user_factories:empty_data"}, "the dataset is empty", EXIT_BAD_JOB),
    ({"data": "user_factories:wrong_width_data"}, "dataset item 0", EXIT_BAD_JOB),
    ({"device": "cuda"}, "cuda", EXIT_BAD_JOB),
])
def test_a_job_that_fails_before_tuning_is_one_line_and_locks_nothing(factories, capsys, change, says, code):
    import torch

    if change.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    path = write_job(factories / "job.yaml", quick_job(factories, **change))
    capsys.readouterr()
    assert main(["tune", "-q", str(path)]) == code
    assert says in one_error_line(capsys.readouterr().err)
    write_job(path, quick_job(factories))   # corrected: runs, without --fresh or --resume
    assert main(["tune", "-q", str(path)]) == EXIT_OK, capsys.readouterr().err
    assert json.loads((factories / "mlp.ait.run" / "run.json").read_text())["complete"]


def test_an_output_that_cannot_be_written_stops_before_any_work(factories, capsys):
    (factories / "a-file").write_text("")   # a folder that cannot be made (root ignores read-only modes)
    path = write_job(factories / "job.yaml", quick_job(factories, output=str(factories / "a-file" / "mlp.ait")))
    capsys.readouterr()
    assert main(["tune", "-q", str(path)]) == EXIT_BAD_JOB
    assert "output: cannot write into" in one_error_line(capsys.readouterr().err)
    assert not list(factories.glob("*.run")) and not (factories / "mlp.md").exists()


def test_a_run_folder_that_cannot_be_written_is_one_line(factories, capsys):
    (factories / "a-file").write_text("")
    path = write_job(factories / "job.yaml", quick_job(factories))
    capsys.readouterr()
    assert main(["tune", "-q", str(path), "--run-dir", str(factories / "a-file" / "run")]) == EXIT_BAD_JOB
    assert "run-dir: cannot write into" in one_error_line(capsys.readouterr().err)   # before any work


def test_an_aot_winner_is_checked_from_the_runs_own_checkpoint(factories, capsys):
    """AOTInductor packages are native code: a checkpoint load refuses them unless allowed. The run that
    wrote the checkpoint loads it back (the checkpoint check and the post-deploy check) trusting it by its
    hash, and exits 0 with the report written. The build runs contained, as job files do by default."""
    data = quick_job(factories, backends=[{"type": "TorchInductorAotBackend"}], executor={"type": "inline"})
    data["strategy"] = {"type": "OneBackend", "performance_validation": False, "measure": FAST_MEASURE}
    path = write_job(factories / "job.yaml", data)
    code = main(["tune", str(path)])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.out[-3000:] + captured.err[-3000:]
    report = json.loads((factories / "mlp.json").read_text())
    assert report["checkpoint_check"]["passed"], report["checkpoint_check"]
    assert "(matches)" in captured.out and (factories / "mlp.md").exists()
    assert "TorchInductorAotBackend" in json.dumps(report["report"]["modules"][0])


def test_a_changed_checkpoint_is_not_trusted(tmp_path):
    from aitune_ray.errors import CheckpointIntegrityError
    from aitune_ray.checkpoint.own import OwnCheckpoint

    import aitune_ray as ait
    import torch

    module = ait.Module(torch.nn.Linear(2, 2), "m")
    module.stay_eager("a test: eager is what it keeps")
    own = OwnCheckpoint(tmp_path / "m.ait")
    own.save(module)
    with own.load(ait.Module(torch.nn.Linear(2, 2), "m")) as loaded:
        torch.testing.assert_close(loaded.module.weight, module.module.weight)
    with open(own.path, "ab") as out:
        out.write(b"\0")
    with pytest.raises(CheckpointIntegrityError, match="changed after this run wrote it"):
        with own.load(ait.Module(torch.nn.Linear(2, 2), "m")):
            pass


def test_an_unexpected_error_is_one_line_and_exit_1(factories, capsys, monkeypatch):
    """Whatever goes wrong past the job's own checks (here the run itself raises) is one line, no traceback."""
    import aitune_ray.command.cli as cli

    def broken(*args, **kwargs):
        raise RuntimeError("the disk went away\nsecond line")

    monkeypatch.setattr(cli, "run_jobs", broken)
    path = write_job(factories / "job.yaml", quick_job(factories))
    capsys.readouterr()
    assert main(["tune", "-q", str(path)]) == EXIT_FAILED
    line = one_error_line(capsys.readouterr().err)
    assert "RuntimeError: the disk went away second line" in line and "-vv" in line
