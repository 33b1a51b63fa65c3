"""Temporary folders on a shared machine: a private root of this user's, and owners told alive by a lock they
hold, never by a pid (aitune_ray/runtime/tempdirs.py)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aitune_ray.runtime import tempdirs

ROOT = Path(__file__).resolve().parent.parent

OWNER = """
import sys
from aitune_ray.runtime import tempdirs
print(tempdirs.make("work"), flush=True)
sys.stdin.read()   # until the test closes stdin or kills this process
"""


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """A shared temporary directory of the test's own (sticky and open to all, as /tmp is)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def owner_process(shared: Path) -> tuple[subprocess.Popen, Path]:
    env = dict(os.environ, TMPDIR=str(shared),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-c", OWNER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    return proc, Path(proc.stdout.readline().strip())


def end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdin.close()
    proc.stdout.close()


def test_a_planted_name_with_a_huge_pid_breaks_nothing(shared):
    """The attack as filed: names the old sweep parsed for a pid, planted by another user, one with pid 10**30."""
    for name in (f"aitune-ray-work-p{10 ** 30}-x", f"aitune-ray-logs-p{2 ** 70}-y"):
        (shared / name).write_text("planted")
    (shared / f"aitune-ray-build-p{10 ** 30}-z").mkdir()
    made = tempdirs.make("work")
    assert made.parent == shared / f"aitune-ray-{os.getuid()}" and made.is_dir()
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o700 and stat.S_IMODE(made.stat().st_mode) == 0o700
    assert sorted(p.name for p in shared.iterdir() if p.name.startswith("aitune-ray-") and "-p" in p.name) == [
        f"aitune-ray-build-p{10 ** 30}-z", f"aitune-ray-logs-p{2 ** 70}-y", f"aitune-ray-work-p{10 ** 30}-x"]


@pytest.mark.parametrize("plant", ["symlink", "file", "open_mode", "other_user"])
def test_a_root_that_is_not_this_users_private_folder_is_not_used(shared, plant, caplog):
    root = shared / f"aitune-ray-{os.getuid()}"
    elsewhere = shared / "attackers-folder"
    elsewhere.mkdir()
    if plant == "symlink":
        root.symlink_to(elsewhere)
    elif plant == "file":
        root.write_text("planted")
    elif plant == "open_mode":
        root.mkdir()
        root.chmod(0o777)
    else:
        if os.getuid() != 0:
            pytest.skip("making a folder of another user's needs root")
        root.mkdir(mode=0o700)
        os.chown(root, 12345, 12345)
    made = tempdirs.make("work")
    assert made.is_dir() and made.parent != root and made.parent.parent == shared
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o700 and made.parent.stat().st_uid == os.getuid()
    assert list(elsewhere.iterdir()) == [], "a temporary folder was made where the planted link points"
    assert "is not used for temporary folders" in caplog.text
    assert tempdirs.make("work").parent == made.parent   # one fallback per process


def test_a_live_owners_folder_stays_whatever_its_pid_and_goes_once_the_owner_is_killed(shared):
    """Liveness is the owner's lock, which the kernel drops when the process dies: a folder of a process in
    another pid namespace (its pid means nothing here) stays while the process lives."""
    proc, folder = owner_process(shared)
    try:
        assert folder.is_dir() and folder.parent == tempdirs.private_root()
        (folder / "result").write_text("work in progress")
        assert tempdirs.sweep() == [] and folder.exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert tempdirs.sweep() == [folder] and not folder.exists()
        assert not [p.name for p in folder.parent.iterdir() if p.name.endswith(".lock")], "a dead owner's lock was left"
    finally:
        end(proc)


def test_the_first_folder_sweeps_gone_owners_but_keeps_marked_and_foreign_folders(shared):
    proc, dead = owner_process(shared)
    end(proc)
    _, kept = owner_process_ended(shared)
    tempdirs.keep(kept)
    root = dead.parent
    token = dead.name.split("-")[1]
    foreign = root / f"work-{token}-planted"
    foreign.symlink_to(shared)   # a symlink named like a folder of the dead owner: never followed, never removed
    unrelated = root / "something-else"
    unrelated.mkdir()
    made = tempdirs.make("work")   # this process's first folder in this root: sweeps first
    assert made.exists() and not dead.exists() and kept.exists() and foreign.is_symlink() and unrelated.exists()
    assert shared.exists()


def owner_process_ended(shared: Path) -> tuple[None, Path]:
    proc, folder = owner_process(shared)
    end(proc)
    return None, folder
