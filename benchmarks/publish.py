"""How a benchmark hands on its table: printed, and with --out written there, its numbers as JSON beside it;
and how a run in a fresh process starts from empty compiler caches (fresh_caches) and hands its numbers to
the benchmark (child_result)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path


def publish(text: str, out: str | None, data) -> None:
    """Print text (markdown); given out, write it there and data to out with a .json suffix."""
    print(text)
    if not out:
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
    path.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n")


def fresh_caches(env: dict) -> dict:
    """env with new, empty Inductor and Triton cache folders, as a new process on a new machine has them."""
    return dict(env, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton-"),
                TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))


def child_result(cmd: list[str], env: dict, timeout: float = 300):
    """Run cmd (a benchmark's own run, in a fresh process) and return the JSON it printed after "RESULT "; a run
    that printed none ends the benchmark with its exit code and the end of its output."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"a run failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(line[len("RESULT "):])
