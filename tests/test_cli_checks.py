"""Every mistake the tune command can see before the work is refused before it: one `error:` line, exit 2,
within seconds, and nothing recorded or built (the run itself is replaced by a spy that fails the test)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from aitune_ray.command import cli
from aitune_ray.command.cli import EXIT_BAD_JOB, EXIT_INTERRUPTED, main
from tests.test_cli import REPO, eager_job, write_job

#: Generous for 2 busy cores: each check takes well under a second beyond the job file's own imports.
SECONDS = 60


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """The run (recording, builds) must not start: reaching it fails the test."""
    def started(*args, **kwargs):
        raise AssertionError("the work started: the mistake was not caught before it")

    monkeypatch.setattr(cli, "run_jobs", started)
    monkeypatch.syspath_prepend(str(REPO))


def refused(capsys, argv: list[str]) -> str:
    """Run the command, which must exit 2 with one error line within SECONDS: that line."""
    started = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_BAD_JOB and len(err) == 1 and err[0].startswith("error: "), (code, err)
    assert elapsed < SECONDS, elapsed
    return err[0]


def test_a_missing_job_file_is_one_line_within_seconds(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, ["tune", "nowhere.yaml"])
    assert line == "error: nowhere.yaml: cannot read job file nowhere.yaml: No such file or directory"


@pytest.mark.parametrize("how", ["module", "console script"])
def test_the_command_says_a_missing_job_file_before_torch_is_imported(tmp_path, how):
    """As a user starts it (python -m aitune_ray, or the aitune-ray script): the package checks the job file
    as it is imported, before torch loads (-X importtime lists every import the process made)."""
    script = tmp_path / "aitune-ray"   # the console script's body, under the script's name
    script.write_text("import sys\nfrom aitune_ray.command.cli import main\nsys.exit(main())\n")
    start = ["-m", "aitune_ray"] if how == "module" else [str(script)]
    proc = subprocess.run([sys.executable, "-X", "importtime", *start, "tune", "nowhere.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == EXIT_BAD_JOB, proc.stderr[-2000:]
    said = [line for line in lines if not line.startswith("import time:")]
    assert said == ["error: nowhere.yaml: cannot read job file nowhere.yaml: No such file or directory"]
    imported = [line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")]
    assert "aitune_ray.command.early" in imported and "torch" not in imported


@pytest.mark.parametrize("option, example", [("--output", "job.ait"), ("--report", "job.md")])
def test_an_output_or_report_that_is_a_folder_is_refused_naming_a_file(tmp_path, capsys, option, example):
    folder = tmp_path / "out"
    folder.mkdir()
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    line = refused(capsys, ["tune", str(job), option, str(folder)])
    assert line.endswith(f"{option[2:]}: {folder} is a folder; name a file, e.g. {option} {folder / example}")


def test_an_output_folder_beside_an_earlier_run_says_how_to_keep_its_results(tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    (tmp_path / "out.run").mkdir()   # the run folder an earlier run of --output out left
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    line = refused(capsys, ["tune", str(job), "--output", str(folder)])
    assert line.endswith(f"to keep the earlier run's results add --run-dir {folder}.run --resume")


def test_an_output_where_no_folder_can_be_made_is_refused(tmp_path, capsys):
    (tmp_path / "plain").write_text("a file, not a folder")
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    line = refused(capsys, ["tune", str(job), "--output", str(tmp_path / "plain" / "mlp.ait")])
    assert f"output: cannot write into {tmp_path / 'plain'}" in line and line.endswith("choose another path with "
                                                                                       "--output")


def test_a_run_dir_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "runs").write_text("a file")
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    line = refused(capsys, ["tune", str(job), "--run-dir", str(tmp_path / "runs")])
    assert line.endswith(f"run folder: {tmp_path / 'runs'} is a file, not a folder; choose another with --run-dir")


def test_a_gpu_kind_without_ray_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("AITUNE_RAY_EXECUTOR", raising=False)
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path, executor={"type": "inline", "gpu_kind": "H100"}))
    line = refused(capsys, ["tune", str(job)])
    assert "executor.gpu_kind: 'H100' needs the ray executor, and this job runs inline" in line


def test_a_gpu_kind_this_machine_lacks_is_refused_before_a_local_ray_starts(tmp_path, capsys, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has GPUs: whether they are H100s decides")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path, executor={"type": "ray", "gpu_kind": "H100"}))
    line = refused(capsys, ["tune", str(job)])
    assert "gpu_kind 'H100': no Ray cluster address is given" in line and "GPU kinds here: none" in line
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()   # no Ray was started for it


def test_a_gpu_kind_no_node_of_a_joined_cluster_has_is_refused(tmp_path, capsys, monkeypatch):
    """A Ray this process has joined (as a test or a notebook does): its live nodes are asked, no actor made."""
    class JoinedRay:
        @staticmethod
        def is_initialized():
            return True

        @staticmethod
        def nodes():
            return [{"Alive": True, "Resources": {"GPU": 8.0, "CPU": 64.0, "accelerator_type:A100": 1.0}}]

    monkeypatch.setitem(sys.modules, "ray", JoinedRay)
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path, executor={"type": "ray", "gpu_kind": "H100"}))
    line = refused(capsys, ["tune", str(job)])
    assert "gpu_kind 'H100': no live node of the Ray cluster has GPUs of that kind" in line
    assert line.endswith("GPU kinds there: A100")


def test_a_backend_whose_library_is_missing_names_the_extra(tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime"
                        else find_spec(name, *a))
    data = eager_job(tmp_path, backends=[{"type": "TorchEagerBackend"}, {"type": "ONNXRuntimeBackend"}])
    data["strategy"]["type"] = "MaxThroughput"
    line = refused(capsys, ["tune", str(write_job(tmp_path / "job.yaml", data))])
    assert line.endswith('backends[1]: ONNXRuntimeBackend needs onnxruntime, which is not installed here; '
                         'pip install -e ".[onnx]"')


def test_a_model_module_that_imports_a_missing_library_names_the_extra(tmp_path, capsys, monkeypatch):
    (tmp_path / "hf_factories.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = eager_job(tmp_path, model="hf_factories:make_model")
    line = refused(capsys, ["tune", str(write_job(tmp_path / "job.yaml", data))])
    assert line.endswith('model: hf_factories imports transformers, which is not installed; '
                         'pip install -e ".[transformers]"')


def test_every_extra_named_for_a_library_exists_and_brings_it():
    tomllib = pytest.importorskip("tomllib")

    from aitune_ray.command.checks import MODEL_EXTRAS
    from aitune_ray.executors.doctor import LIBRARIES

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: " ".join(extras[extra]).lower().replace("_", "-") for extra in extras}
    for library, extra in [*MODEL_EXTRAS.items(), *((lib, e) for lib, (_, e) in LIBRARIES.items() if e)]:
        assert extra in extras, (library, extra)
        assert library.partition(".")[0].replace("_", "-") in names[extra], (library, extra)


def test_ctrl_c_says_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_jobs", interrupted)
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    code = main(["tune", str(job), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_INTERRUPTED and len(err) == 1
    assert err[0] == (f"error: interrupted; outstanding work was cancelled and no checkpoint was written; run "
                      f"aitune-ray tune {job} --run-dir {tmp_path / 'run'} --resume to continue where it stopped")
