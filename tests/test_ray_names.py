"""Readable names in Ray's dashboard: tuner actors say where they run, tasks say what they do.

Ray's state API (the dashboard's) is what the dashboard shows; this starts a Ray of its own with the
dashboard on, tunes a small module on two fake GPUs and reads the actors' and tasks' names back.
"""

from __future__ import annotations

import socket
import time

import pytest

ray = pytest.importorskip("ray")

from aitune_ray.cluster import RayExecutor  # noqa: E402
from tests.test_ray_executor import WORKER_PATH, fast, max_throughput, recorded  # noqa: E402


def _until(read, ok, timeout_s: float = 60.0):
    """read() until ok(value) (the state API reports task events a little after they happen)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_actors_and_tasks_carry_readable_names(tmp_path):
    from ray.util.state import list_actors, list_tasks

    context = ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=True, log_to_driver=False,
                       runtime_env={"env_vars": {"PYTHONPATH": WORKER_PATH}})
    state = f"http://{context.dashboard_url}"   # this test's Ray, whatever else runs on the machine
    try:
        with RayExecutor(task_timeout_s=30, remeasure_rounds=3, log_dir=str(tmp_path / "logs")) as executor:
            report = recorded("names", max_throughput([fast(tag=1)])).tune(executor=executor)
            assert report.results[0].ok
            host = socket.gethostname()
            actors = _until(lambda: [a.repr_name for a in list_actors(address=state, detail=True) if a.class_name == "TunerActor"],
                            lambda names: len([n for n in names if n]) >= 2)
            assert sorted(actors) == [f"tuner gpu0@{host}", f"tuner gpu1@{host}"]
            tasks = _until(lambda: {t.name for t in list_tasks(address=state, limit=1000)},
                           lambda names: {"build FastBackend:names", "confirm names"} <= names)
            assert {"build FastBackend:names", "baseline names", "confirm names"} <= tasks
    finally:
        ray.shutdown()
