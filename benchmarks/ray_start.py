"""Where a local Ray's start and stop go, as RayExecutor starts and stops it (local single-node mode).

    python benchmarks/ray_start.py --repeats 3 --out ray_start.md

Each repeat, in a fresh process: RayExecutor(max_actors=1).open() (which returns at once: Ray starts on a
thread of its own), Ray's start and its actor waited for, then close(). It
times the parts of ray.init that wait (the head processes, its API server's start, the wait for the node
to register, the node's other processes) and, in close(), each of Ray's processes that ray.shutdown()
stops (it sends SIGTERM and waits up to a second for each). Then the same once more with plain
ray.shutdown(), without the executor killing Ray's autoscaler monitor first, and once more in Ray's own
start order (without aitune_ray.cluster.lean_start: the API server started and waited for before the
node's processes, the node's registration asked once a second). The three run side by side, repeat after
repeat. These wrap Ray's own functions by name (ray 2.60): a Ray that renamed them shows fewer rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from publish import child_result, publish  # noqa: E402


def _timed(owner, name: str, label, seconds: dict) -> None:
    real = getattr(owner, name, None)
    if real is None:
        return

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            key = label(args, kwargs) if callable(label) else label
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started

    setattr(owner, name, wrapper)


def child(plain_shutdown: bool, plain_start: bool) -> dict:
    import ray
    from ray._private import node, services

    from aitune_ray.cluster import RayExecutor, lean_start, session

    seconds: dict[str, float] = {}
    _timed(node.Node, "start_head_processes", "ray.init: head processes (GCS, monitor, API server)", seconds)
    _timed(node.Node, "start_api_server", "ray.init: of which the API server's start", seconds)
    _timed(services, "get_node", "ray.init: waiting for the node to register (Ray's own asks)", seconds)
    _timed(node.Node, "start_ray_processes", "ray.init: the node's processes (raylet and others)", seconds)
    _timed(lean_start, "wait_registered", "ray.init: the lean start's wait for the node to register "
                                          "(asked every 20 ms)", seconds)
    _timed(node.Node, "_kill_process_impl", lambda args, kwargs: f"ray.shutdown: stopping {args[1]}", seconds)
    if plain_shutdown:
        session.stop_local_monitor = lambda: False
    if plain_start:
        def as_ray_does(init) -> bool:
            init()
            return False

        lean_start.start = as_ray_does
    executor = RayExecutor(max_actors=1)
    started = time.perf_counter()
    executor.open()
    seconds["RayExecutor.open() returned (Ray starts on a thread of its own)"] = time.perf_counter() - started
    slot = executor.pool.slots[0]   # waits for that start
    seconds["Ray up and the actor created (executor.open_s)"] = executor.open_s
    seconds["started without the API server (1 yes, 0 no)"] = float(bool(executor.started_lean))
    started = time.perf_counter()
    ray.get(slot.ready_ref)
    seconds["the actor up (after its creation)"] = time.perf_counter() - started
    started = time.perf_counter()
    executor.close()
    seconds["RayExecutor.close()"] = time.perf_counter() - started
    return seconds


def run(plain_shutdown: bool, plain_start: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, __file__, "--child"] + (["--plain-shutdown"] if plain_shutdown else []) + \
        (["--plain-start"] if plain_start else [])
    return child_result(cmd, env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plain-shutdown", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plain-start", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.plain_shutdown, args.plain_start)))
        return 0
    runs: dict[str, list] = {"the executor's close()": [], "plain ray.shutdown()": [], "Ray's own start order": []}
    for _ in range(args.repeats):   # the three side by side, repeat after repeat
        runs["the executor's close()"].append(run(False))
        runs["plain ray.shutdown()"].append(run(True))
        runs["Ray's own start order"].append(run(False, plain_start=True))
    keys = list(dict.fromkeys(k for rs in runs.values() for r in rs for k in r))
    lines = [f"### A local Ray's start and stop ({args.repeats} fresh processes each; median s)", "",
             "| part | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for key in keys:
        cells = []
        for rs in runs.values():
            values = [r[key] for r in rs if key in r]
            cells.append(f"{statistics.median(values):.2f}" if values else "-")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    publish("\n".join(lines), args.out, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
