"""Fault matrix, the cases that need a Ray of their own or none: a worker node removed mid-job (a two-node
ray.cluster_utils.Cluster), a Ray head that cannot be reached, and a checkpoint save that cannot write."""

from __future__ import annotations

import gc
import getpass
import os
import resource
import signal
import socket
import tempfile
import threading
from pathlib import Path

import pytest
import torch

import aitune_ray as ait
from aitune_ray.command import cli
from aitune_ray.errors import AITuneRayError, ClusterError
from aitune_ray.measure.timing import MeasureConfig
from tests.fault_helpers import (GateConfig, GatedBackend, recorded_net, start_gate, temporaries_left, tuner_processes,
                                 wait_until)
from tests.ray_helpers import BUSY_HOST, FastBackend, HelperConfig, SlowNet, WeightsAotBackend

ROOT = Path(__file__).resolve().parent.parent
WORKER_PATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
MEASURE = MeasureConfig(warmup_runs=1, min_runs=5, max_runs=20, max_seconds=0.2)


def closed_port() -> int:
    """A local port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_ray_head_is_a_clear_error_naming_the_address():
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(ClusterError, match=address):
        ait.RayExecutor(address=address).open()
    assert not ray.is_initialized()


def test_the_cli_names_an_unreachable_address(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "job.yaml").write_text("model: tests.resume_job:make_model\ndata: tests.resume_job:make_data\n"
                                       "backends: [{type: \"tests.ray_helpers:FastBackend\"}]\ndevice: cpu\n")
    address = f"127.0.0.1:{closed_port()}"
    assert cli.main(["tune", "--address", address, "job.yaml"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert f"the Ray cluster at {address} cannot be reached" in err and "Traceback" not in err
    assert not (tmp_path / "job.ait").exists()


def tuned(tmp_path) -> tuple[ait.Module, Path]:
    module = recorded_net(ait.MaxThroughputStrategy([FastBackend(HelperConfig(tag=1))], measure_config=MEASURE))
    module.tune(executor=ait.InlineExecutor(remeasure_rounds=0))
    path = ait.save(module, tmp_path / "out" / "net.ait")
    return module, path


def test_a_save_that_runs_out_of_space_keeps_the_earlier_checkpoint(tmp_path):
    module, path = tuned(tmp_path)
    before = path.read_bytes()
    # A file size limit makes every write past it fail as a full disk does (EFBIG instead of ENOSPC).
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256, old_limit[1]))
    try:
        with pytest.raises(AITuneRayError) as caught:
            ait.save(module, path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert str(path.parent) in str(caught.value) or path.name in str(caught.value), caught.value
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]   # no partial file beside it
    ait.load(ait.Module(SlowNet(), name="net"), path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_save_into_a_read_only_folder_keeps_the_earlier_checkpoint(tmp_path):
    module, path = tuned(tmp_path)
    before = path.read_bytes()
    path.parent.chmod(0o555)
    try:
        with pytest.raises(AITuneRayError, match=str(path.parent)):
            ait.save(module, path)
    finally:
        path.parent.chmod(0o755)
    assert path.read_bytes() == before


@pytest.mark.slow
def test_a_worker_node_removed_mid_job_costs_its_in_flight_task_only_which_runs_again_elsewhere(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("PYTHONPATH", WORKER_PATH)   # the raylets' workers import this checkout
    # Inductor's cache is the compiler's, not the driver's: it stays where it was (as the scratch fixture keeps it)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR") or
                       os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    workers = [cluster.add_node(num_cpus=1, num_gpus=1) for _ in range(2)]   # one fake GPU per worker node
    events: list[dict] = []
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        gate = start_gate("node")
        executor = ait.RayExecutor(task_timeout_s=60, remeasure_rounds=3, log_dir=str(tmp_path / "logs"),
                                   progress=events.append)
        module = recorded_net(ait.MaxThroughputStrategy([
            GatedBackend(GateConfig(tag=1, gate="node", at="build")), FastBackend(HelperConfig(tag=2)),
            WeightsAotBackend(HelperConfig(tag=3))], measure_config=MEASURE, **BUSY_HOST))
        removed = []

        def remove_the_node():
            _, node_id = ray.get(gate.wait_arrived.remote())
            removed.append(node_id)
            cluster.remove_node(next(n for n in workers if n.node_id == node_id))
            ray.get(gate.release.remote())

        remover = threading.Thread(target=remove_the_node, daemon=True)
        remover.start()
        report = module.tune(executor=executor)
        remover.join()
        by_tag = {r.spec["config"]["tag"]: r for r in report.results}
        assert all(r.ok for r in by_tag.values()), [(r.backend, r.status, r.error) for r in report.results]
        assert removed[0][:8] not in by_tag[1].node              # it ran again, on the node that is left
        assert ray.get(gate.builds.remote()) == [1, 1]            # the lost build twice; nothing else again
        requeued = [e for e in events if e["event"] == "queued" and e.get("lost_log")]
        assert [e["backend"] for e in requeued] == ["GatedBackend"]
        assert Path(requeued[0]["lost_log"]).is_file()            # the lost attempt's log is kept
        assert report.chosen_result().spec["config"]["tag"] in (1, 2, 3)
        path = ait.save(module, tmp_path / "net.ait")
        fresh = ait.load(ait.Module(SlowNet(), name="net"), path)
        x = torch.randn(3, 8)
        torch.testing.assert_close(fresh(x), module.module.linear(x))
        del module, report, fresh
        executor.close()
        gc.collect()
        assert not temporaries_left(scratch), temporaries_left(scratch)
        assert not list((tmp_path / "logs").glob("work-actor*"))
    finally:
        ray.shutdown()
        cluster.shutdown()
    wait_until(lambda: not tuner_processes(), what="no tuner worker process")
