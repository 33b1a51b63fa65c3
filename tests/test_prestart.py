"""A local Ray's workers launched ahead of the tuner actors, as many as the first wave has, each with torch
and the actor's module imported before it takes work (aitune_ray.cluster.prestart)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from aitune_ray.cluster import RayExecutor, lean_start, prestart  # noqa: E402

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _raylet() -> psutil.Process:
    infos = ray._private.worker._global_node.all_processes["raylet"]
    return psutil.Process(infos[0].process.pid)


def _workers() -> list[psutil.Process]:
    """The Python workers the raylet has launched (Ray names them "ray::IDLE", "ray::Where" ..., its agents
    "ray::DashboardAgent" and "ray::RuntimeEnvAgent")."""
    found = []
    for child in _raylet().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            if "default_worker.py" in line or (line.startswith("ray::") and "Agent" not in line.split()[0]):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _loaded_torch(process: psutil.Process) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{process.pid}/maps").read_text()
    except OSError:
        return False


def test_the_raylet_command_gets_the_capped_count_and_other_processes_are_left_alone(monkeypatch):
    from ray._private import services

    started = []
    monkeypatch.setattr(services, "start_ray_process", lambda command, kind, *a, **k: started.append((kind, command)))
    with prestart.capped(2):
        services.start_ray_process(["raylet", "--a=1", f"{prestart.FLAG}16", "--b"], "raylet")
        services.start_ray_process(["gcs_server", f"{prestart.FLAG}16"], "gcs_server")
    services.start_ray_process(["raylet", f"{prestart.FLAG}16"], "raylet")   # outside: Ray's own count
    assert started == [("raylet", ["raylet", "--a=1", f"{prestart.FLAG}2", "--b"]),
                       ("gcs_server", ["gcs_server", f"{prestart.FLAG}16"]),
                       ("raylet", ["raylet", f"{prestart.FLAG}16"])]


def test_the_system_config_prestarts_and_preloads_only_when_asked():
    assert prestart.supported()   # Ray 2.60's raylet command carries the count
    assert prestart.system_config(0) == {"prestart_worker_first_driver": False, "enable_worker_prestart": False}
    config = prestart.system_config(2)
    assert config["prestart_worker_first_driver"] is True and config["enable_worker_prestart"] is False
    assert config["preload_python_modules"] == ["torch", "actors.tuner"]


def test_one_worker_is_launched_with_torch_imported_and_the_first_actor_runs_in_it(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(lean_start, "REGISTER_S", 300.0)   # busy CI cores: about the prestart, not the deadline
    with prestart.capped(1):   # three CPUs: uncapped, Ray would launch three
        lean_start.start(lambda: ray.init(num_cpus=3, num_gpus=0, include_dashboard=False, log_to_driver=False,
                                          _system_config=prestart.system_config(1)))
    try:
        deadline = time.monotonic() + 180
        while not any(_loaded_torch(w) for w in _workers()):   # launched, connected, importing torch
            assert time.monotonic() < deadline, "no worker imported torch"
            time.sleep(0.05)
        workers = _workers()
        assert len(workers) == 1, [w.cmdline() for w in workers]

        @ray.remote(num_cpus=0)
        class Where:
            def where(self):
                return os.getpid(), "torch" in sys.modules, "actors.tuner" in sys.modules

        pid, has_torch, has_actor = ray.get(Where.remote().where.remote(), timeout=180)
        assert (pid, has_torch, has_actor) == (workers[0].pid, True, True)
    finally:
        ray.shutdown()


def test_the_executor_starts_ray_with_one_prestarted_worker_per_actor(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(lean_start, "REGISTER_S", 300.0)
    executor = RayExecutor(max_actors=1)
    try:
        executor.open()
        pool = executor.pool
        assert executor.prestarted == 1
        assert f"{prestart.FLAG}1" in _raylet().cmdline()
        assert ray.get(pool.slots[0].ready_ref, timeout=180)["pid"] != os.getpid()
    finally:
        executor.close()
    assert not ray.is_initialized()
    off = RayExecutor(max_actors=1, prestart=False)
    try:
        off.open()
        off.pool   # noqa: B018 - waits for the start
        assert off.prestarted == 0 and f"{prestart.FLAG}0" in _raylet().cmdline()
    finally:
        off.close()
