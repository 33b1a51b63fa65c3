"""A package that every new process must compile from source is found, and the user is told how to fix it."""

from __future__ import annotations

import compileall
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[1])
PROBE = ("import json; from aitune_ray.runtime.bytecode import advice, uncached; "
         "found = uncached(('slowpkg', 'absentpkg')); print(json.dumps([found, advice(found) if found else '']))")


def _site(tmp_path: Path) -> Path:
    package = tmp_path / "site" / "slowpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    return package.parent


def _probe(site: Path, *flags: str, prelude: str = "") -> tuple[list[str], str]:
    """uncached() and its advice, in a new interpreter with flags (-B: PYTHONDONTWRITEBYTECODE), after prelude."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), ROOT])
    done = subprocess.run([sys.executable, *flags, "-c", prelude + PROBE], env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    found, text = json.loads(done.stdout.strip().splitlines()[-1])
    return found, text


def test_a_package_without_cached_bytecode_that_no_import_may_write_is_named_with_the_fix(tmp_path):
    site = _site(tmp_path)
    found, text = _probe(site, "-B")
    assert found == ["slowpkg"]        # absentpkg is not installed: not named
    assert "PYTHONDONTWRITEBYTECODE is set" in text
    assert f"python -m compileall -q {site}" in text


def test_once_the_caches_are_written_nothing_is_named(tmp_path):
    site = _site(tmp_path)
    assert compileall.compile_dir(str(site), quiet=1)
    assert _probe(site, "-B") == ([], "")


def test_a_writable_folder_without_caches_is_fine_because_the_first_import_writes_them(tmp_path):
    assert _probe(_site(tmp_path)) == ([], "")


def test_a_folder_this_user_may_not_write_without_caches_is_named(tmp_path):
    # what os.access answers for a read-only folder, also where the tests run as root (who may write anyway)
    found, text = _probe(_site(tmp_path), prelude="import os; os.access = lambda path, mode: False; ")
    assert found == ["slowpkg"] and "read-only" in text


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write a read-only folder")
def test_a_read_only_folder_without_caches_is_named(tmp_path):
    site = _site(tmp_path)
    package = site / "slowpkg"
    package.chmod(0o555)
    try:
        found, text = _probe(site)
    finally:
        package.chmod(0o755)
    assert found == ["slowpkg"] and "read-only" in text


def test_the_doctor_and_the_ray_executor_pass_the_advice_on(monkeypatch, caplog):
    import torch

    from aitune_ray.executors import doctor
    from aitune_ray.cluster import ray_executor, session

    monkeypatch.setattr(doctor, "uncached", lambda: ["torch"])
    row = doctor.machine_report()
    assert row["uncached_bytecode"] == ["torch"]
    assert any("no cached bytecode for torch" in note and "compileall" in note for note in row["notes"])

    class NotStarting:      # stands for the thread open() starts Ray on
        def __init__(self, start, what):
            pass

    monkeypatch.setattr(session, "uncached", lambda: ["torch", "sympy"])
    monkeypatch.setattr(session, "Background", NotStarting)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger=session.__name__):
        ray_executor.RayExecutor().open()
    assert any("start slowly" in r.getMessage() and "torch, sympy" in r.getMessage() for r in caplog.records)


def test_the_fix_names_the_folder_that_holds_a_package_or_a_module(tmp_path, monkeypatch):
    from aitune_ray.runtime.bytecode import folders

    site = _site(tmp_path)
    (site / "slowmod.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(site))
    assert folders(["slowpkg", "slowmod", "absentpkg"]) == [str(site)]
