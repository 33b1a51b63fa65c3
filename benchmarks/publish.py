"""How a benchmark hands on its table: printed, and with --out written there, with its numbers beside it as a
record for results_table.py (the benchmark, date, machine and command, and the numbers); and how a run in a
fresh process starts from empty compiler caches (fresh_caches)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path


def machine() -> str:
    """The machine in a few words: its GPUs (or CPUs) and torch's version."""
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        what = f"{len(names)} x {names[0]}"
    else:
        what = f"{os.cpu_count()} CPUs ({platform.machine()})"
    return f"{what}, torch {torch.__version__}"


def command() -> str:
    """The command line that ran this benchmark, as a user would type it from the repository root."""
    script = Path(sys.argv[0])
    name = f"benchmarks/{script.name}" if script.parent.name == "benchmarks" else str(script)
    return " ".join(["python", name] + [shlex.quote(a) for a in sys.argv[1:]])


def publish(text: str, out: str | None, data, benchmark: str | None = None) -> None:
    """Print text (markdown); given out, write it there and, with a .json suffix, the record of data."""
    print(text)
    if not out:
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
    path.with_suffix(".json").write_text(json.dumps(record_of(data, benchmark), indent=1, default=str) + "\n")


def record_of(data, benchmark: str | None = None) -> dict:
    """data as a record for results_table.py: the benchmark's name, today's date, this machine, this command."""
    return {"benchmark": benchmark or Path(sys.argv[0]).stem, "date": datetime.date.today().isoformat(),
            "machine": machine(), "command": command(), "note": "", "result": data}


def fresh_caches(env: dict) -> dict:
    """env with new, empty Inductor and Triton cache folders, as a new process on a new machine has them."""
    return dict(env, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="triton-"),
                TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
