"""User backends that stop at a chosen point until a test lets them go (or kills them), and that count builds.

Importable by Ray workers (tests.fault_helpers). A test places a fault with a gate, never with a sleep:

- GatedBackend blocks in its build, in its first timed call (after the correctness check), or when it is
  activated again for a re-measurement, on a named Ray actor (Gate): the test waits until the backend
  has arrived there, then kills the process it runs in.
- In a process without Ray (a driver the test starts and kills), the backend named by AITUNE_TEST_BLOCK
  prints a line and blocks forever instead.
- AITUNE_TEST_BUILD_LOG names a file where every build appends its tag (rN for a restore from a
  stored result, which rebuilds a JIT backend without samples): how many builds really ran.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
import time

import pytest

from tests.ray_helpers import FastBackend, HelperConfig, recorded


@dataclasses.dataclass
class GateConfig(HelperConfig):
    """gate: the Gate actor's name ("" for none). at: "build", "measure", "remeasure" (or "" for nowhere)."""

    gate: str = ""
    at: str = "build"


def _log_build(tag: int, restore: bool) -> None:
    path = os.environ.get("AITUNE_TEST_BUILD_LOG")
    if path:
        with open(path, "a") as log:
            log.write(f"{'r' if restore else ''}{tag}\n")


class GatedBackend(FastBackend):
    config_class = GateConfig

    def _build(self, module, samples, device, workdir):
        _log_build(self.config.tag, restore=not len(samples))   # a JIT restore rebuilds without samples
        if self.config.gate and len(samples):
            import ray

            ray.get(ray.get_actor(self.config.gate, namespace=NAMESPACE).built.remote(self.config.tag))
        if os.environ.get("AITUNE_TEST_BLOCK") == str(self.config.tag):
            print(f"BLOCKED {self.config.tag}", flush=True)
            sys.stdout.flush()
            threading.Event().wait()
        super()._build(module, samples, device, workdir)
        self._checks = len(samples)
        self._calls = 0
        if self.config.at == "build":
            self._wait()

    def _infer(self, x):
        self._calls = getattr(self, "_calls", 0) + 1
        if self.config.at == "measure" and self._calls == getattr(self, "_checks", -1) + 1:
            self._wait()
        return super()._infer(x)

    def _activate(self):
        if self.config.at == "remeasure":
            self._wait()

    def _wait(self) -> None:
        if self.config.gate:
            import ray

            gate = ray.get_actor(self.config.gate, namespace=NAMESPACE)
            ray.get(gate.arrive.remote(os.getpid(), ray.get_runtime_context().get_node_id()))


class Gate:
    """A named Ray actor (async): arrive() blocks until release(); wait_arrived() returns the arriving
    process's pid and its Ray node id."""

    def __init__(self):
        self._arrived = asyncio.Event()
        self._released = asyncio.Event()
        self._pid = None
        self._built: list[int] = []

    async def arrive(self, pid: int, node_id: str = "") -> None:
        self._pid = (pid, node_id)
        self._arrived.set()
        await self._released.wait()

    async def wait_arrived(self) -> tuple[int, str]:
        await self._arrived.wait()
        return self._pid

    async def release(self) -> None:
        self._released.set()

    async def built(self, tag: int) -> None:
        self._built.append(tag)

    async def builds(self) -> list[int]:
        """Tags of the GatedBackends built with this gate so far (restores left out)."""
        return list(self._built)


NAMESPACE = "aitune-ray-tests"   # gates are found by name from every job (a driver the test starts, too)


def start_gate(name: str):
    """The named gate, on this driver's node: a test that removes a worker node mid-job must not lose its gate
    with it (a build run again elsewhere would then fail calling the gate, not because of the node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0)(Gate).options(name=name, namespace=NAMESPACE, scheduling_strategy=here).remote()


def recorded_net(strategy):
    """A wrapped SlowNet named "net" that has recorded a call at batch sizes 1 and 4."""
    return recorded("net", strategy)


# ----- what a test leaves behind ---------------------------------------------------------------------
@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The driver's temporary folders go to tmp_path/tmp, so that a test can see what is left there."""
    import tempfile

    import getpass

    folder = tmp_path / "tmp"
    folder.mkdir()
    # Inductor's cache is the compiler's, not the driver's: keep it where it was (the real temp folder)
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                       f"torchinductor_{getpass.getuser()}")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", cache)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def temporaries_left(folder) -> list[str]:
    """What is left in a temporary folder, relative to it: every file and folder but this user's private root
    of temporary folders and its owners' lock files (aitune_ray.runtime.tempdirs), which outlive a run."""
    from pathlib import Path

    found = set()
    for root, folders, files in os.walk(folder):
        found.update(str(Path(root, name).relative_to(folder)) for name in folders + files)
    return sorted(without_temp_root(found))


def without_temp_root(paths) -> set[str]:
    """paths (relative, as strings) without this user's private temporary root and the lock files in it."""
    import re
    from pathlib import Path

    from aitune_ray.runtime import tempdirs

    root = f"{tempdirs.PREFIX}{os.getuid()}"

    def bookkeeping(path: str) -> bool:
        parts = Path(path).parts
        return parts[-1] == root or (len(parts) > 1 and parts[-2] == root
                                     and re.fullmatch(r"[0-9a-f]{16}\.lock", parts[-1]) is not None)
    return {p for p in paths if not bookkeeping(p)}


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every live process below pid (from /proc; zombies left out)."""
    parents: dict[int, list[int]] = {}
    lines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] == "Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
        lines[int(entry)] = cmdline
    found, todo = {}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found[child] = lines[child]
            todo.append(child)
    return found


def tuner_processes() -> dict[int, str]:
    """This process's descendants that host (or hosted) a tuner actor."""
    return {p: c for p, c in descendants(os.getpid()).items() if "TunerActor" in c}


def alive_tuner_actors(dashboard_url: str) -> list:
    from ray.util.state import list_actors

    return list_actors(address=f"http://{dashboard_url}", filters=[("state", "=", "ALIVE"),
                                                                   ("class_name", "=", "TunerActor")])


def wait_until(condition, timeout_s: float = 60.0, what: str = "") -> None:
    """Wait for a condition that an asynchronous cleanup makes true (a killed process exiting)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout_s:g} s: {what}")
        time.sleep(0.1)
