"""Run folders and outputs are data that can be hostile, like checkpoints: each test here is an attack made the way
someone who can write the folder (or hand the user a record) would make it, and checks what the project refuses
(CPU, no Ray)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from aitune_ray.backend import Backend, BackendConfig
from aitune_ray.command import cli

ROOT = Path(__file__).resolve().parent.parent

JOB = """\
model: tests.resume_job:make_model
data: tests.resume_job:make_data
strategy:
  type: MaxThroughput
  measure: {warmup_runs: 1, min_runs: 5, max_runs: 20, max_seconds: 0.2}
backends:
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 1}}
  - {type: "tests.fault_helpers:GatedBackend", config: {tag: 2, infer_delay_s: 0.002}}
executor: {type: inline, contain: false}
device: cpu
"""


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("AITUNE_TEST_BUILD_LOG", str(tmp_path / "builds.log"))
    (tmp_path / "job.yaml").write_text(JOB)
    return tmp_path / "job.yaml"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (symlinks as their target's text), by relative path."""
    return {str(p.relative_to(folder)): (str(p.readlink()).encode() if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def users_experiment(folder: Path) -> dict[str, bytes]:
    """Another tool's experiment folder: its own run.json, metrics and weights; no result of this project."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"experiment": "lr-sweep", "seed": 3, "complete": True}))
    (folder / "metrics.json").write_text(json.dumps({"accuracy": 0.91}))
    (folder / "model.pt").write_bytes(b"\x80\x02 the user's weights")
    return snapshot(folder)


# ----- attack 1: a folder of the user's files named as the run folder -----------------------------------
@pytest.mark.parametrize("flags", [[], ["--resume"], ["--fresh"]])
def test_a_folder_of_the_users_files_is_never_cleared(job, capsys, flags):
    """`tune --run-dir FOLDER` on a folder that holds a run.json of another tool and no results: refused in one
    line, with or without --resume / --fresh, and every file of it is still there, byte for byte."""
    experiment = job.parent / "experiment"
    before = users_experiment(experiment)
    capsys.readouterr()
    assert cli.main(["tune", "-q", *flags, "--run-dir", str(experiment), str(job)]) == cli.EXIT_FAILED
    assert "is not a run folder of aitune-ray" in one_error_line(capsys.readouterr().err)
    assert snapshot(experiment) == before
    assert not (job.parent / "builds.log").exists()   # nothing was tuned against it


# ----- attack 2: a tampered run folder on --resume ----------------------------------------------------------
@dataclasses.dataclass
class CodeConfig(BackendConfig):
    pass


class CodeArtifactBackend(Backend):
    """An ahead-of-time backend whose artifact is code its loader runs: the stand-in for an AOTInductor package
    (whose loader runs a shared library, unpickles and may run a compiler), without a compiler in the test."""

    config_class = CodeConfig
    is_jit = False

    def _build(self, module, samples, device, workdir):
        self._linear = module.linear
        self._file = Path(workdir) / "package.py"
        self._file.write_text("LOADED = True\n")

    def _artifacts(self):
        return {"package.py": self._file}

    def _load(self, module, state, artifacts, device):
        exec(compile(Path(artifacts["package.py"]).read_text(), "package.py", "exec"), {})  # noqa: S102
        self._linear, self._file = module.linear, Path(artifacts["package.py"])

    def _infer(self, x):
        return self._linear(x)


CODE_JOB = """\
model: tests.resume_job:make_model
data: tests.resume_job:make_data
strategy: {type: OneBackend, performance_validation: false, measure: {warmup_runs: 1, min_runs: 3, max_runs: 5}}
backends: [{type: "tests.test_run_folder_attacks:CodeArtifactBackend"}]
executor: {type: inline, contain: false}
device: cpu
"""


@pytest.fixture
def finished_run(tmp_path, monkeypatch, capsys):
    """A finished run of a job whose one candidate's artifact is code: (job file, its run folder)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "job.yaml").write_text(CODE_JOB)
    assert cli.main(["tune", "-q", "job.yaml"]) == cli.EXIT_OK, capsys.readouterr().err
    capsys.readouterr()
    return tmp_path / "job.yaml", tmp_path / "job.ait.run"


def only(folder: Path, pattern: str) -> Path:
    found = [p for p in folder.glob(pattern) if not p.name.startswith(".")]
    assert len(found) == 1, found
    return found[0]


def payload(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('the payload ran')\n"


def resumed(job: Path, capsys, *flags: str) -> str:
    """Resume the job; it must fail in one line: that line."""
    assert cli.main(["tune", "-q", "--resume", *flags, str(job)]) == cli.EXIT_FAILED
    return one_error_line(capsys.readouterr().err)


def signed_edit(run: Path, name: str, change) -> None:
    """Change a file through the project's own folder API (as a bug of the project, or an attacker holding the
    user's key, would): the manifest then vouches for it, and only the confinement checks remain."""
    from aitune_ray.executors.run_dir import RunFolder

    identity = json.loads((run / "run.json").read_text())["identity"]
    folder = RunFolder.open(run, {"job": identity["job"]})
    folder.write_json(name, change(folder.read_json(name)))
    folder.close()


def test_a_swapped_code_artifact_is_refused_and_never_runs(finished_run, capsys):
    job, run = finished_run
    marker = job.parent / "marker"
    only(run, "*/artifacts/*/package.py").write_text(payload(marker))
    line = resumed(job, capsys)
    assert "package.py was changed after aitune-ray wrote it" in line
    assert not marker.exists()


def test_a_record_naming_an_artifact_outside_the_folder_is_refused(finished_run, capsys):
    """The record's artifact path made to climb out (../): changed on disk it fails its hash; even vouched for by
    the manifest, a name that is not the artifact's own place in the folder is refused, and nothing is read."""
    job, run = finished_run
    marker = job.parent / "marker"
    (job.parent / "outside.py").write_text(payload(marker))
    record = only(run, "*/results/*.json")
    written = record.read_bytes()
    data = json.loads(written)
    for name in data["result"]["artifacts"]:
        data["result"]["artifacts"][name] = {"file": "../../outside.py"}
    record.write_text(json.dumps(data))
    assert "was changed after aitune-ray wrote it" in resumed(job, capsys)
    record.write_bytes(written)

    def climb(entry):
        for name in entry["result"]["artifacts"]:
            entry["result"]["artifacts"][name] = {"file": "../../outside.py"}
        return entry

    signed_edit(run, str(record.relative_to(run)), climb)
    assert "not its place in the folder" in resumed(job, capsys)
    assert not marker.exists()


def test_a_forged_manifest_is_refused_and_the_folder_left_alone(finished_run, capsys):
    """Someone who can rewrite the whole folder plants a payload and writes a manifest with matching hashes, but
    cannot sign it with this user's key: refused on --resume, and --fresh removes nothing."""
    import hashlib

    job, run = finished_run
    marker = job.parent / "marker"
    only(run, "*/artifacts/*/package.py").write_text(payload(marker))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["files"] = {name: hashlib.sha256((run / name).read_bytes()).hexdigest() for name in manifest["files"]}
    manifest["hmac"] = hashlib.sha256(json.dumps(manifest["files"]).encode()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(manifest))
    before = snapshot(run)
    assert "is not signed with this user's key" in resumed(job, capsys)
    assert cli.main(["tune", "-q", "--fresh", str(job)]) == cli.EXIT_FAILED
    assert "left alone" in one_error_line(capsys.readouterr().err)
    assert snapshot(run) == before
    assert not marker.exists()


def test_a_log_path_in_a_record_copies_nothing_from_outside(finished_run, capsys):
    """A record naming a log outside the folder (a secret of the user's): the resumed run's report links no copy
    of it (a changed record is refused outright; one the manifest vouches for has its log path dropped)."""
    job, run = finished_run
    secret = job.parent / "secret.txt"
    secret.write_text("the user's secret\n")
    record = only(run, "*/results/*.json")

    def name_the_secret(entry):
        entry["result"]["log_path"] = str(secret)
        entry["log"] = "../../secret.txt"
        return entry

    signed_edit(run, str(record.relative_to(run)), name_the_secret)
    assert cli.main(["tune", "-q", "--resume", str(job)]) == cli.EXIT_OK, capsys.readouterr().err
    copies = [p for p in job.parent.rglob("*") if p.is_file() and p != secret
              and b"the user's secret" in p.read_bytes()]
    assert copies == []


# ----- attack 5: `aitune-ray report` on someone else's record ------------------------------------------------
def hostile_record(folder: Path, log_paths: list[str]) -> Path:
    """A job's JSON report as someone else hands it over: its results name logs wherever they like."""
    timing = {"batch_size": 2, "median_ms": 2.0, "p90_ms": 2.5, "cv": 0.1, "runs": 10}
    results = [{"key": f"k{i}", "backend": "TorchEagerBackend", "spec": {"type": "x:TorchEagerBackend"},
                "status": "ok", "timings": {"2": timing}, "log_path": path} for i, path in enumerate(log_paths)]
    module = {"module": "m", "strategy": "MaxThroughputStrategy", "device": "cpu", "call_mix": {"2": 1},
              "baseline": {"2": timing}, "results": results}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.json"
    path.write_text(json.dumps({"report": {"modules": [module]}}))
    return path


def test_report_copies_no_file_from_outside_the_records_folder(tmp_path, capsys):
    """The record names an absolute secret, one reached by ../, one through a link planted in its folder, and a
    FIFO: report renders, links none of them, and no copy of the secret exists anywhere; a log inside the
    record's own folder is still kept."""
    import os

    secret = tmp_path / "home" / "passwd"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:the user's secret\n")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "link.log").symlink_to(secret)
    (theirs / "logs").symlink_to(secret.parent)
    os.mkfifo(theirs / "fifo.log")
    (theirs / "own.log").write_text("a log of the record's own\n")
    record = hostile_record(theirs, [str(secret), "../home/passwd", "link.log", "logs/passwd", "fifo.log",
                                     "own.log"])
    capsys.readouterr()
    assert cli.main(["report", str(record), "--out", str(tmp_path / "out")]) == cli.EXIT_OK
    copies = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret
              and b"the user's secret" in p.read_bytes()]
    assert copies == []
    kept = json.loads((tmp_path / "out" / "run.json").read_text())["report"]["modules"][0]["results"]
    assert [r["log_path"] for r in kept] == ["", "", "", "", "", "run-logs/own.log"]


def test_report_writes_no_file_through_a_link_in_its_output_folder(tmp_path):
    """Rendered in place, into the record's own folder, where a link named as the report's log copy points at a
    file of the user's: the link is replaced, the user's file is unchanged."""
    theirs = tmp_path / "theirs"
    hostile_record(theirs, ["own.log"])
    (theirs / "own.log").write_text("payload written where the link points\n")
    precious = tmp_path / "bashrc"
    precious.write_text("the user's file\n")
    (theirs / "run-logs").mkdir()
    (theirs / "run-logs" / "own.log").symlink_to(precious)
    assert cli.main(["report", str(theirs / "run.json")]) == cli.EXIT_OK
    assert precious.read_text() == "the user's file\n"


# ----- attack 16: two runs into one run folder or one output -------------------------------------------------
def test_a_second_run_is_refused_while_the_first_holds_the_folder(job, capsys):
    """The first run holds its run folder (opened here, in the test process, as a live run holds it): a second
    run, with --fresh too, is refused in one line naming the holder, and the live run's folder is untouched."""
    import os

    from aitune_ray.executors.run_dir import RunFolder

    live = RunFolder.open(job.parent / "job.ait.run", mode="new")
    live.write_json("net/baseline.json", {})
    before = snapshot(live.path)
    try:
        for flags in ([], ["--resume"], ["--fresh"]):
            assert cli.main(["tune", "-q", *flags, str(job)]) == cli.EXIT_FAILED
            line = one_error_line(capsys.readouterr().err)
            assert "is in use by another run" in line and f"pid {os.getpid()} on host" in line, line
            assert snapshot(live.path) == before
    finally:
        live.close()
    assert not (job.parent / "builds.log").exists()


def test_a_second_run_into_the_same_output_is_refused(job, capsys):
    """Another run writing the same checkpoint, through a run folder of its own: refused, naming the holder."""
    from aitune_ray.executors.run_lock import Lock

    held = Lock.beside(job.parent / "job.ait", "output job.ait")
    try:
        assert cli.main(["tune", "-q", "--run-dir", str(job.parent / "elsewhere"), str(job)]) == cli.EXIT_FAILED
        assert "output job.ait is in use by another run (pid" in one_error_line(capsys.readouterr().err)
    finally:
        held.release()
    assert not (job.parent / "elsewhere").exists() and not (job.parent / "builds.log").exists()


# ----- attack 17: links, ~ and names that become paths -------------------------------------------------------
def test_fresh_on_a_linked_run_folder_leaves_the_link_and_its_target(job, capsys):
    target = job.parent / "scratch"
    before = users_experiment(target)
    (job.parent / "job.ait.run").symlink_to(target)
    assert cli.main(["tune", "-q", "--fresh", str(job)]) == cli.EXIT_FAILED
    assert "is a symbolic link" in one_error_line(capsys.readouterr().err)
    assert (job.parent / "job.ait.run").readlink() == target and snapshot(target) == before
    assert sorted(p.name for p in job.parent.iterdir()) == [".job.ait.lock", "job.ait.run", "job.yaml", "scratch"]


def test_a_tilde_in_a_job_file_is_the_home_folder(job, monkeypatch):
    from aitune_ray.command.job import load_jobs

    monkeypatch.setenv("HOME", str(job.parent / "home"))
    job.write_text(JOB + "output: ~/models/net.ait\nreport: ~/reports/net.md\n")
    (loaded,) = load_jobs(job)
    assert loaded.output == str(job.parent / "home" / "models" / "net.ait")
    assert loaded.report == str(job.parent / "home" / "reports" / "net.md")


def test_model_names_and_gpu_kinds_stay_one_path_component(job, capsys):
    """A model named ../../x and a GPU kind ../../y: their checkpoints and run folders stay where the job puts
    them, each a plain name of one component."""
    import argparse

    from aitune_ray.command.job import load_jobs

    entry = "\n".join("  " + line for line in JOB.splitlines() if not line.startswith(("executor", "device")))
    job.write_text("models:\n  - name: ../../escaped\n" + entry.replace("  model:", "    model:", 1)
                   .replace("\n  ", "\n    ") + "\nexecutor: {type: inline, gpu_kinds: ['../../kind']}\ndevice: cpu\n")
    jobs = load_jobs(job)
    for loaded in jobs:
        output = Path(loaded.output)
        assert output.parent == Path(".") and not output.name.startswith("."), loaded.output
    args = argparse.Namespace(run_dir=str(job.parent / "runs"), resume=False, fresh=False)
    for loaded in jobs:
        folder = cli.open_run_folder(loaded, args, several=True)
        assert folder.path.parent == job.parent / "runs" and not folder.path.name.startswith(".")
        folder.close()
    assert sorted(p.name for p in job.parent.iterdir()) == ["job.yaml", "runs"]


def test_a_link_planted_inside_a_run_folder_is_never_followed(tmp_path):
    """A module's folder swapped for a link to the user's folder: reading through it is refused, --fresh removes
    nothing (the link is not a file the manifest names), and the user's files are untouched."""
    import shutil

    from aitune_ray.errors import RunFolderError
    from aitune_ray.executors.run_dir import RunFolder

    run = tmp_path / "run"
    folder = RunFolder.open(run, mode="new")
    folder.write_json("net/baseline.json", {})
    folder.close()
    users = tmp_path / "users"
    users_experiment(users)
    (users / "baseline.json").write_text("{}\n")   # the very bytes the manifest names
    before = snapshot(users)
    shutil.rmtree(run / "net")
    (run / "net").symlink_to(users)
    folder = RunFolder.open(run, mode="resume")
    with pytest.raises(RunFolderError, match="net/baseline.json cannot be read"):
        folder.module("net").baseline()
    with pytest.raises(RunFolderError, match="cannot be written"):
        folder.write_json("net/results/k.json", {})
    folder.close()
    with pytest.raises(RunFolderError, match="aitune-ray did not write .*nothing was removed"):
        RunFolder.open(run, mode="fresh")
    assert snapshot(users) == before and (run / "net").is_symlink()
