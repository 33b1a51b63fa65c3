"""The aitune-ray command and its job files (CPU; the Ray job test is marked slow)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml

import aitune_ray as ait
from aitune_ray.command.cli import main
from aitune_ray.errors import ConfigError
from aitune_ray.command.job import load_job, parse_job

REPO = Path(__file__).resolve().parents[1]
MLP_JOB = REPO / "examples" / "mlp" / "job.yaml"
FAST_MEASURE = {"warmup_runs": 1, "min_runs": 3, "max_runs": 10, "max_seconds": 0.1}


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def mlp_job() -> dict:
    return yaml.safe_load(MLP_JOB.read_text())


def write_job(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def eager_job(tmp_path: Path, **changes) -> dict:
    """The mlp job made quick: eager backend only, no performance gate, tiny measurement, inline."""
    data = mlp_job()
    data.update(backends=[{"type": "TorchEagerBackend"}], executor={"type": "inline"},
                output=str(tmp_path / "mlp.ait"), report=str(tmp_path / "mlp.md"))
    data["strategy"] = {"type": "OneBackend", "performance_validation": False, "measure": FAST_MEASURE}
    data.update(changes)
    return data


# ----- schema errors name the key --------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(epochs=3), "epochs: unknown key"),
    (lambda d: d["strategy"].update(min_speedup_ratio="fast"),
     "strategy.min_speedup_ratio: expected a number, got str"),
    (lambda d: d["strategy"].update(performance_validation="yes"),
     "strategy.performance_validation: expected a boolean, got str"),
    (lambda d: d["strategy"]["measure"].update(max_runs=2.5), "strategy.measure.max_runs: expected an integer"),
    (lambda d: d["strategy"]["measure"].update(runs=5), "strategy.measure.runs: unknown key"),
    (lambda d: d["strategy"].update(type="Fastest"), "strategy.type: unknown strategy 'Fastest'"),
    (lambda d: d["backends"][1].update(type="TensorFlowBackend"), "backends[1].type: unknown backend"),
    (lambda d: d["backends"][0].update(type="no_such_pkg.mod:Backend"), "backends[0].type: cannot import"),
    (lambda d: d["backends"][0].update(config={"fullgraph": True, "unroll": 4}),
     "backends[0].config.unroll: unknown key"),
    (lambda d: d["backends"][0].update(config={"fullgraph": "no"}),
     "backends[0].config.fullgraph: expected a boolean, got str"),
    (lambda d: d["backends"][0].update(config={"mode": "turbo"}), "backends[0].config: mode must be one of"),
    (lambda d: d.update(modules=[{"path": "blocks", "title": "x"}]), "modules[0].title: unknown key"),
    (lambda d: d.update(modules=[7]), "modules[0]: expected a mapping or a string, got int"),
    (lambda d: d.update(device="tpu"), "device: expected auto, cpu, cuda or cuda:N"),
    (lambda d: d["executor"].update(type="slurm"), "executor.type: expected one of"),
    (lambda d: d["executor"].update(warm_up="everything"), "executor.warm_up: expected one of"),
    (lambda d: d["executor"].update(max_actors="4"), "executor.max_actors: expected an integer or null, got str"),
    (lambda d: d.pop("data"), "data: required key is missing"),
    (lambda d: d.update(model="examples.mlp.model"), "model: expected an import path"),
    (lambda d: d.update(model="examples.mlp.model:build"), "model: 'examples.mlp.model' has no 'build'"),
    (lambda d: d["strategy"].update(type="OneBackend"), "backends: OneBackend takes exactly one backend, got 2"),
    (lambda d: d.update(backends=[]), "backends: the list is empty"),
    (lambda d: d["strategy"].update(type="LatencyBudget"), "strategy.latency_budget_ms: LatencyBudget needs"),
    (lambda d: d["strategy"].update(type="LatencyBudget", latency_budget_ms=0),
     "strategy.latency_budget_ms: expected a positive number"),
    (lambda d: d["strategy"].update(type="MinLatency", latency_budget_ms=5),
     "strategy.latency_budget_ms: only LatencyBudget takes a latency budget, not MinLatency"),
])
def test_schema_error_names_the_key(change, message):
    data = copy.deepcopy(mlp_job())
    change(data)
    with pytest.raises(ConfigError) as info:
        parse_job(data)
    assert message in str(info.value)


@pytest.mark.parametrize("strategy, expected", [
    ({"type": "MinLatency"}, "MinLatencyStrategy"),
    ({"type": "LatencyBudget", "latency_budget_ms": 7.5}, "LatencyBudgetStrategy"),
    ({"type": "LatencyBudgetStrategy", "latency_budget_ms": 7.5}, "LatencyBudgetStrategy")])
def test_the_latency_strategies_are_named_in_a_job(strategy, expected):
    data = mlp_job()
    data["strategy"] = strategy
    made = parse_job(data).make_strategy("cpu")
    assert type(made).__name__ == expected
    assert getattr(made, "latency_budget_ms", None) == strategy.get("latency_budget_ms")


def test_example_jobs_are_valid():
    for path in sorted((REPO / "examples").glob("*/job.yaml")):
        job = load_job(path)
        assert job.output and job.report, path
        assert job.executor.type in ("auto", "ray"), path


def test_bad_job_file_exits_2_and_names_the_key(tmp_path, capsys):
    data = mlp_job()
    data["executor"]["workers"] = 8
    code = main(["tune", str(write_job(tmp_path / "job.yaml", data))])
    assert code == 2
    assert "executor.workers: unknown key" in capsys.readouterr().err
    assert not (tmp_path / "mlp.ait").exists()


def test_not_yaml_or_not_a_mapping_exits_2(tmp_path, capsys):
    (tmp_path / "a.yaml").write_text("model: [unclosed\n")
    (tmp_path / "b.yaml").write_text("- just\n- a list\n")
    assert main(["tune", str(tmp_path / "a.yaml")]) == 2
    assert main(["tune", str(tmp_path / "b.yaml")]) == 2
    assert main(["tune", str(tmp_path / "missing.yaml")]) == 2
    out = capsys.readouterr().err
    assert "not valid YAML" in out and "a mapping of keys" in out and "cannot read job file" in out


def test_bad_module_path_exits_2(tmp_path, capsys):
    data = eager_job(tmp_path, modules=[{"path": "blocks.9"}])
    assert main(["tune", str(write_job(tmp_path / "job.yaml", data))]) == 2
    assert "modules[0].path" in capsys.readouterr().err


def test_address_with_inline_executor_exits_2(tmp_path):
    path = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    assert main(["tune", str(path), "--executor", "inline", "--address", "ray://head:10001"]) == 2


# ----- runs ------------------------------------------------------------------------------------------
def test_inline_run_of_the_mlp_example(tmp_path, monkeypatch, capsys):
    """The example job as written, with --executor inline: checkpoint, report, and a checkpoint that loads."""
    monkeypatch.chdir(REPO)
    out = tmp_path / "mlp.ait"
    report = tmp_path / "report.md"
    code = main(["tune", "examples/mlp/job.yaml", "--executor", "inline", "--device", "cpu",
                 "--output", str(out), "--report", str(report)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "[mlp] building  TorchInductorJitBackend" in printed
    assert "[mlp] done    ONNXRuntimeBackend: ok" in printed
    # eager's row, chosen or not (on a loaded host the decision may keep eager, saying why)
    assert "| TorchEager (baseline)" in printed and "Decision:" in printed
    assert "max abs difference" in printed and "(matches)" in printed
    assert "### mlp" in report.read_text()
    data = json.loads(report.with_suffix(".json").read_text())
    assert data["checkpoint_check"]["passed"] and data["report"]["modules"][0]["module"] == "mlp"
    assert_checkpoint_matches_eager(out)


def assert_checkpoint_matches_eager(path: Path) -> None:
    from examples.mlp.model import make_data, make_model

    loaded = ait.load(ait.Module(make_model(), name="mlp"), path)
    eager = make_model()
    with torch.no_grad():
        for x in make_data()[::3]:
            torch.testing.assert_close(loaded(x), eager(x), rtol=1e-4, atol=1e-5)


def test_pipeline_both_modules_inline(tmp_path, capsys):
    data = yaml.safe_load((REPO / "examples" / "pipeline" / "job.yaml").read_text())
    data.update(backends=[{"type": "TorchEagerBackend"}], output=str(tmp_path / "p.ait"),
                report=str(tmp_path / "p.json"))
    data["strategy"] = {"type": "FirstWins", "performance_validation": False, "measure": FAST_MEASURE}
    code = main(["tune", str(write_job(tmp_path / "job.yaml", data)), "--executor", "inline"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "[encoder] building" in printed and "[head] building" in printed
    assert "2 of 2 module(s) decided" in printed
    assert (tmp_path / "p.md").exists() and (tmp_path / "p.json").exists()

    from examples.pipeline.model import make_data, make_model

    fresh = make_model()
    fresh.encoder, fresh.head = ait.Module(fresh.encoder, "encoder"), ait.Module(fresh.head, "head")
    ait.load(fresh, tmp_path / "p.ait")
    item = make_data()[0]
    with torch.no_grad():
        torch.testing.assert_close(fresh(**item), make_model()(**item))


FAILING_BACKEND = '''
import dataclasses
from aitune_ray.backend import Backend, BackendConfig


@dataclasses.dataclass
class BrokenConfig(BackendConfig):
    reason: str = "unsupported operator"


class BrokenBackend(Backend):
    config_class = BrokenConfig

    def _build(self, module, samples, device, workdir):
        raise RuntimeError(self.config.reason)

    def _infer(self, *args, **kwargs):
        raise AssertionError("never built")
'''


def test_exit_1_when_no_module_could_be_tuned(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_backend.py").write_text(textwrap.dedent(FAILING_BACKEND))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = eager_job(tmp_path, backends=[{"type": "broken_backend:BrokenBackend",
                                          "config": {"reason": "no kernel for gelu"}}])
    code = main(["tune", str(write_job(tmp_path / "job.yaml", data))])
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert "[mlp] FAILED  BrokenBackend: error" in printed
    assert "no kernel for gelu" in printed
    assert not (tmp_path / "mlp.ait").exists()
    report = json.loads((tmp_path / "mlp.json").read_text())
    assert "mlp" in report["report"]["failures"]

    data["backends"][0]["config"] = {"reasons": "x"}
    assert main(["tune", str(write_job(tmp_path / "job.yaml", data))]) == 2
    assert "backends[0].config.reasons: unknown key" in capsys.readouterr().err


def test_inline_path_never_imports_ray(tmp_path):
    job = write_job(tmp_path / "job.yaml", eager_job(tmp_path))
    script = ("import sys; from aitune_ray.command.cli import main; code = main(['tune', sys.argv[1]]); "
              "assert 'ray' not in sys.modules, 'ray was imported'; sys.exit(code)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", script, str(job)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "mlp.ait").exists()


def test_python_dash_m_shows_help():
    for module in ("aitune_ray", "aitune_ray.command.cli"):
        proc = subprocess.run([sys.executable, "-m", module, "tune", "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert proc.returncode == 0 and "--executor" in proc.stdout


# ----- a real Ray cluster and `ray job submit` -------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_under(temp_dir: str) -> list[int]:
    """PIDs of the Ray processes whose command line names temp_dir, and all their descendants."""
    children: dict[int, list[int]] = {}
    roots = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
        if temp_dir in cmdline:
            roots.append(int(entry.name))
    found, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid not in found and pid != os.getpid():
            found.add(pid)
            stack.extend(children.get(pid, []))
    return sorted(found)


def stop_cluster(temp_dir: str) -> None:
    """Stop only the cluster started with temp_dir: its processes by PID, never `ray stop` for everyone."""
    pids = processes_under(temp_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 15
        while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.5)
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
        if not pids:
            break


def start_head(command: list[str], env: dict, temp_dir: str, attempts: int = 3) -> None:
    """`ray start --head ...`. Ray gives its raylet a fixed 30 s to register, which a host busy with other
    work can miss ("timed out during startup"): that start's processes are stopped and it is tried again, at
    most attempts times; any other failure fails at once."""
    for attempt in range(attempts):
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        said = started.stdout[-3000:] + started.stderr[-3000:]
        if started.returncode == 0:
            return
        stop_cluster(temp_dir)
        assert "timed out during startup" in said and attempt + 1 < attempts, said


#: The README's "Run it on a Ray cluster" steps, as this test runs them (its own ports, temp folder and home).
README_STEPS = ("export RAY_AUTH_MODE=token", "ray get-auth-token --generate", "ray start --head",
                "ray job submit --address http://127.0.0.1:8265 --submission-id mlp --working-dir . --",
                "ray job logs --address http://127.0.0.1:8265 mlp")


@pytest.mark.slow
def test_ray_job_submit_on_a_local_cluster_as_the_readme_says(tmp_path):
    """The README's steps on a fresh home with token authentication on: generate the token, start a head,
    submit a job with absolute output paths, read its logs, find the checkpoint and the report where the
    README says; the head this test started is stopped by its own temporary folder."""
    if not (REPO / "aitune_ray" / "cluster" / "ray_executor.py").exists():
        pytest.skip("aitune_ray/cluster/ray_executor.py does not exist yet")
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        pytest.skip(f"no ray command next to {sys.executable}")
    readme = (REPO / "README.md").read_text()
    assert all(step in readme for step in README_STEPS), [s for s in README_STEPS if s not in readme]

    work = tmp_path / "work"
    ignore = shutil.ignore_patterns("__pycache__", "out", "*.ait")
    for name in ("aitune_ray", "actors", "examples"):
        shutil.copytree(REPO / name, work / name, ignore=ignore)
    tiny = eager_job(tmp_path, device="cpu", executor={"type": "auto", "warm_up": "off"})
    tiny["strategy"]["deploy_check_rounds"] = 0
    del tiny["output"], tiny["report"]
    write_job(work / "tiny.yaml", tiny)
    out = tmp_path / "out"   # absolute: the job runs in Ray's copy of the working directory
    temp_dir = tempfile.mkdtemp(prefix="ait-ray-", dir="/tmp")   # short: Ray's socket paths must fit
    dashboard = free_port()
    home = tmp_path / "home"   # a fresh home: no token yet, as on a fresh machine
    home.mkdir()
    env = dict(os.environ, RAY_AUTH_MODE="token", HOME=str(home), PYTHONPATH="")
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "AITUNE_RAY_EXECUTOR"):
        env.pop(name, None)   # the submitted job chooses Ray by the address `ray job submit` sets
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    generated = subprocess.run([str(ray_bin), "get-auth-token", "--generate"], env=env, capture_output=True,
                               text=True, timeout=120)
    assert generated.returncode == 0 and (home / ".ray" / "auth_token").is_file(), generated.stderr[-2000:]
    token = (home / ".ray" / "auth_token").read_text().strip()
    start = [str(ray_bin), "start", "--head", "--num-cpus=2", f"--port={free_port()}",
             "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
             f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
             f"--temp-dir={temp_dir}", f"--object-store-memory={200 * 1024 * 1024}", "--disable-usage-stats"]
    url = f"http://127.0.0.1:{dashboard}"
    submission = f"aitune-ray-test-{os.getpid()}-{int(time.time())}"
    try:
        start_head(start, env, temp_dir)
        from tests.test_local_ray_leftovers import wait_for_dashboard_with_token

        wait_for_dashboard_with_token(url, token)
        submit = [str(ray_bin), "job", "submit", "--address", url, "--submission-id", submission,
                  "--working-dir", str(work), "--", sys.executable, "-m", "aitune_ray", "tune", "tiny.yaml",
                  "--output", str(out / "mlp.ait"), "--report", str(out / "mlp.md")]
        job = subprocess.run(submit, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        # The streamed tail of `ray job submit` can miss lines; `ray job logs` gives the job's whole log.
        logs = subprocess.run([str(ray_bin), "job", "logs", "--address", url, submission], env=env,
                              capture_output=True, text=True, timeout=120).stdout
        assert job.returncode == 0, logs[-8000:] + job.stdout[-3000:] + job.stderr[-3000:]
        assert "executor: ray" in logs and "(matches)" in logs and f"checkpoint: {out / 'mlp.ait'}" in logs, \
            logs[-8000:]
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    report = json.loads((out / "mlp.json").read_text())
    assert report["job"]["executor"]["type"] == "ray"
    assert report["checkpoint_check"]["passed"]
    assert (out / "mlp.html").is_file()
    assert_checkpoint_matches_eager(out / "mlp.ait")


def test_gpu_pipeline_job_passes_the_schema_and_builds_its_bf16_model():
    from aitune_ray.command.job import load_job

    job = load_job(REPO / "examples" / "pipeline" / "job_gpu.yaml")
    types = [b.type for b in job.backends]
    assert job.strategy.type == "MaxThroughput" and len(types) >= 8 and [m.name for m in job.modules] == \
        ["encoder", "head"]
    assert {"TorchInductorJitBackend", "TorchInductorAotBackend", "TorchAOBackend", "ONNXRuntimeBackend",
            "KernelSelectorBackend"} <= set(types)
    model, data = job.make_model(), job.make_data()
    assert next(model.encoder.parameters()).dtype == torch.bfloat16
    assert data[0]["signal"].dtype == torch.bfloat16 and data[0]["signal"].shape == (8, 64, 1024)
    with torch.no_grad():
        assert model(**data[0]).shape == (8, 10)
