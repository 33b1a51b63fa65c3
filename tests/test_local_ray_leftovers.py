"""A driver that started Ray on this machine and is SIGKILLed leaves nothing behind: its Ray session's
processes end at once (the session reaper), its temporary folders go at the next start (tempdirs), and
its Ray printed no token warning (the local executor asks for token authentication explicitly)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from aitune_ray.runtime import tempdirs

ROOT = Path(__file__).resolve().parent.parent

DRIVER = """
import sys
from aitune_ray.cluster import RayExecutor
import ray

executor = RayExecutor(max_actors=1, warm_up="off")
executor.open()
executor.resolve_device("cpu")
assert executor.pool is not None
print("GCS", ray.get_runtime_context().gcs_address, ray._private.worker._global_node.node_ip_address, flush=True)
print("SESSION", ray._private.worker._global_node.get_session_dir_path(), flush=True)
sys.stdin.read()   # until the test kills this process
"""


#: 127.0.0.1 as /proc/net/tcp and /proc/net/tcp6 write it (the latter as ::ffff:127.0.0.1), and ::1.
LOOPBACK = ("0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000")


def listening_addresses(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net writes them) that listen on TCP port, over IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as src:
            for row in src.read().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:   # 0A: LISTEN
                    found.append(address)
    return found


def wait_until(condition, timeout_s: float) -> bool:
    """Poll condition until it holds (True) or timeout_s passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
def test_a_killed_drivers_ray_session_and_temporary_folders_do_not_outlive_it(tmp_path):
    pytest.importorskip("ray")
    ray_tmp = tempfile.mkdtemp(prefix="rr-", dir="/tmp")   # short: Ray's socket paths must fit
    env = dict(os.environ, HOME=str(tmp_path), TMPDIR=str(tmp_path), RAY_TMPDIR=ray_tmp,
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    stderr = open(tmp_path / "driver.err", "w")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=stderr, text=True)
    session, gcs = "", ""
    try:
        for line in driver.stdout:   # blocks until the driver's Ray and actor are up; no timing involved
            if line.startswith("GCS "):
                gcs, node_ip = line.split()[1:]
            if line.startswith("SESSION "):
                session = line.split(" ", 1)[1].strip()
                break
        assert session, (tmp_path / "driver.err").read_text()[-3000:]
        assert session_processes(session), "no process names the session folder"
        # The local Ray is reachable from this machine only, and its token is readable by this user only.
        assert node_ip == "127.0.0.1" and gcs.startswith("127.0.0.1:"), (node_ip, gcs)
        listening = listening_addresses(int(gcs.rsplit(":", 1)[1]))
        assert listening and all(address in LOOPBACK for address in listening), listening
        token = tmp_path / ".ray" / "auth_token"
        assert token.is_file() and stat.S_IMODE(token.stat().st_mode) == 0o600, oct(token.stat().st_mode)
        root = tmp_path / f"{tempdirs.PREFIX}{os.getuid()}"
        own = [p for p in root.iterdir() if p.name.startswith("logs-")]
        assert own, sorted(p.name for p in root.iterdir())
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # Ray's agents alone lived 60-120 s past such a kill; the reaper ends them within seconds.
        assert wait_until(lambda: not session_processes(session), 30), session_processes(session)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid in session_processes(session) if session else []:
            os.kill(pid, signal.SIGKILL)
        stderr.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert "Token authentication" not in (tmp_path / "driver.err").read_text()
    assert set(tempdirs.sweep(root)) >= set(own) and not any(p.exists() for p in own)


def session_processes(session_dir: str) -> list[int]:
    """PIDs of this user's processes whose command line names session_dir (not this process): what the test
    looks for after a kill, never what the reaper chooses by."""
    needle, uid, found = session_dir.encode(), os.getuid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != uid or needle not in (entry / "cmdline").read_bytes():
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    """Whether pid has ended (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as src:
            return src.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


# A stand-in for Ray's processes: a child of the driver that starts a grandchild (as the raylet starts its
# agents), both naming the session folder, both living 10 minutes unless killed.
RAY_PROCESS = """
import subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
print(helper.pid, flush=True)
time.sleep(600)
"""

REAPED_DRIVER = """
import subprocess, sys
from aitune_ray.cluster.session_reaper import SessionReaper

ray_process = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]], stdout=subprocess.PIPE, text=True)
helper = int(ray_process.stdout.readline())
reaper = SessionReaper([ray_process.pid])   # its helper exists now: recorded before this returns
print("WATCHED", ray_process.pid, helper, reaper.proc.pid, flush=True)
sys.stdin.read()   # until the test kills this process
"""


def test_the_session_reaper_ends_only_the_processes_it_recorded(tmp_path):
    """Once the driver that watched the session is SIGKILLed, the processes Ray started and what they
    started end; a process of the same user that only names the session folder in its command line (a
    `tail -f` of a Ray log) lives on."""
    session = str(tmp_path / "session_2026-01-01_00-00-00_000000_1")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    bystander = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", f"{session}/logs/raylet.out"],
                                 stdin=subprocess.PIPE)
    driver = subprocess.Popen([sys.executable, "-c", REAPED_DRIVER, session, RAY_PROCESS], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    recorded: list[int] = []
    try:
        line = driver.stdout.readline().split()
        assert line and line[0] == "WATCHED", line
        recorded, watcher = [int(line[1]), int(line[2])], int(line[3])
        assert set(recorded) | {bystander.pid} <= set(session_processes(session))
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # The watcher kills what it recorded, waits until it is gone, then exits; 120 s only bounds a hang.
        assert wait_until(lambda: gone(watcher), 120), "the watcher did not finish"
        assert all(gone(pid) for pid in recorded), [pid for pid in recorded if not gone(pid)]
        assert bystander.poll() is None, "the watcher signalled a process it did not record"
    finally:
        for pid in recorded:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stdout.close()
        bystander.stdin.close()
        bystander.wait(timeout=60)
    assert bystander.returncode == 0


def test_a_closed_session_reaper_kills_nothing(tmp_path):
    from aitune_ray.cluster.session_reaper import SessionReaper

    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        reaper = SessionReaper([sleeper.pid])
        reaper.close()   # waits for the watcher to end
        assert reaper.proc is None and sleeper.poll() is None
    finally:
        sleeper.stdin.close()
        sleeper.wait(timeout=60)
    assert sleeper.returncode == 0


@pytest.mark.slow
def test_ray_job_submit_under_token_authentication_as_documented(tmp_path):
    """docs/cluster.md's secure way on a one-machine cluster: `ray start --head` with RAY_AUTH_MODE=token and
    the dashboard on 127.0.0.1; `ray job submit` passes the token when RAY_AUTH_MODE=token is set where it
    runs (the token from RAY_AUTH_TOKEN here; ~/.ray/auth_token by default), and is refused without it. The
    job's own driver connects to the cluster under the token."""
    from tests.test_cli import free_port, stop_cluster

    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        pytest.skip(f"no ray command next to {sys.executable}")
    token = os.urandom(16).hex()
    temp_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")   # short: Ray's socket paths must fit
    env = dict(os.environ, HOME=str(tmp_path), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, PYTHONPATH="")
    env.pop("RAY_ADDRESS", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    dashboard = free_port()
    start = [str(ray_bin), "start", "--head", "--num-cpus=1", f"--port={free_port()}", "--include-dashboard=true",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", f"--ray-client-server-port={free_port()}",
             f"--dashboard-agent-listen-port={free_port()}", f"--temp-dir={temp_dir}",
             f"--object-store-memory={100 * 1024 * 1024}", "--disable-usage-stats"]
    url = f"http://127.0.0.1:{dashboard}"
    # The job's driver connects to the cluster (RAY_ADDRESS), as aitune-ray's does: under the token too.
    submit = [str(ray_bin), "job", "submit", "--address", url, "--", "python", "-c",
              "import ray; ray.init(); print('job ran on', ray.cluster_resources()['CPU'])"]
    try:
        started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        wait_for_dashboard_with_token(url, token)
        without = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
        refused = subprocess.run(submit, env=without, capture_output=True, text=True, timeout=300)
        assert refused.returncode != 0 and "job ran" not in refused.stdout
        assert "uthenticat" in refused.stdout + refused.stderr, refused.stdout[-2000:] + refused.stderr[-2000:]
        job = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=300)
        assert job.returncode == 0 and "job ran" in job.stdout, job.stdout[-3000:] + job.stderr[-3000:]
    finally:
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def wait_for_dashboard_with_token(url: str, token: str, timeout_s: float = 180) -> None:
    import urllib.request

    request = urllib.request.Request(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    deadline = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise TimeoutError(f"the Ray dashboard at {url} did not answer in {timeout_s:.0f} s")
        time.sleep(1)
