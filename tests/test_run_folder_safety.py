"""Run folders stay usable: a kill while one is cleared or created, and a job that fails before any tuning
work, never lock the folder (CPU, no Ray)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aitune_ray.errors import RunFolderError
from aitune_ray.measure.timing import Timing
from aitune_ray.executors.run_dir import RunFolder

IDENTITY = {"job": "a"}
#: The os-level calls that change the file system while a folder is cleared or created.
CALLS = ("rename", "replace", "unlink", "rmdir", "mkdir", "open")


class Killed(BaseException):
    """The simulated SIGKILL: a BaseException, so that no `except Exception` handler runs."""


class Killer:
    """Makes the n-th file-system call of CALLS (counted from 1) kill the process: that call and every
    later one raise Killed, so no clean-up a real kill would skip happens either."""

    def __init__(self, monkeypatch, at: int):
        self.at, self.calls, self.dead = at, 0, False
        for name in CALLS:
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            if self.dead or self.calls == self.at:
                self.dead = True
                raise Killed(real.__name__)
            return real(*args, **kwargs)
        return call


def worked_folder(path: Path, complete: bool) -> RunFolder:
    """A run folder holding tuning work (a baseline and a result file), finished or not."""
    folder = RunFolder.open(path, IDENTITY, mode="new")
    journal = folder.module("net")
    journal.store_baseline({1: Timing(batch_size=1, median_ms=1.0, p90_ms=1.0, cv=0.0, runs=3)})
    folder.write_json("net/results/k.json", {})
    if complete:
        folder.mark_complete()
    return folder


def proceeds(path: Path, mode: str) -> bool:
    try:
        RunFolder.open(path, IDENTITY, mode=mode)
    except RunFolderError:
        return False
    return True


@pytest.mark.parametrize("complete, mode", [(True, "new"), (False, "fresh"), (True, "fresh")])
def test_a_kill_at_any_step_of_clearing_leaves_a_folder_every_mode_accepts(tmp_path, complete, mode):
    """Starting over clears the old folder and creates a new one. A kill at each file-system call of it in
    turn: afterwards --resume and --fresh each proceed, and so does a plain tune where the old run had
    finished (an unfinished one it refuses, as before the kill); nothing set aside is left."""
    at, killed_somewhere = 1, True
    while killed_somewhere:
        for then in ("new", "resume", "fresh") if complete else ("resume", "fresh"):
            case = tmp_path / f"{at}-{then}"
            case.mkdir()
            worked_folder(case / "job.ait.run", complete)
            with pytest.MonkeyPatch.context() as patch:
                killer = Killer(patch, at)
                try:
                    RunFolder.open(case / "job.ait.run", IDENTITY, mode=mode)
                except Killed:
                    pass
                killed_somewhere = killer.dead
            assert proceeds(case / "job.ait.run", then), f"killed at call {at}: --{then} is refused"
            assert [p.name for p in case.iterdir()] == ["job.ait.run"], f"killed at call {at}: leftovers"
            assert (case / "job.ait.run" / "run.json").is_file()
        at += 1
    assert at > 5   # the kill landed on several steps (rename aside, deletes, the new folder, its run.json)


def test_an_unfinished_folder_with_work_is_still_protected(tmp_path):
    worked_folder(tmp_path / "run", complete=False)
    with pytest.raises(RunFolderError, match="--resume continues it"):
        RunFolder.open(tmp_path / "run", IDENTITY, mode="new")
    with pytest.raises(RunFolderError, match="belongs to another run"):
        RunFolder.open(tmp_path / "run", {"job": "b"}, mode="resume")
    assert proceeds(tmp_path / "run", "resume")


def test_a_folder_without_tuning_work_never_locks_the_job(tmp_path):
    """A job that failed before its first baseline or result left run.json (and maybe samples): the corrected
    job, with or without --resume, starts over there."""
    RunFolder.open(tmp_path / "run", IDENTITY, mode="new").write_json("net/module.json", {})
    folder = RunFolder.open(tmp_path / "run", {"job": "corrected"}, mode="new")
    assert not (tmp_path / "run" / "net").exists()
    assert folder.identity["job"] == "corrected"
    folder.close()
    RunFolder.open(tmp_path / "run", {"job": "corrected again"}, mode="resume")


def test_an_unwritable_run_folder_is_one_error(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")   # unwritable for root too, unlike a read-only folder
    with pytest.raises(RunFolderError, match="cannot be written"):
        RunFolder.open(tmp_path / "a-file" / "run", IDENTITY, mode="new")
