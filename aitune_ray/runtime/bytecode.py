"""Whether a new Python process here must compile torch and the compiler stack from source.

Python keeps the bytecode of an imported module in a cache file beside it (or under PYTHONPYCACHEPREFIX).
`pip install` writes those files, and an import writes any that are missing. An environment with neither
(packages installed without them, and PYTHONDONTWRITEBYTECODE set so no import writes them, as some
container images do) compiles every module from source in every new process. Each tuner actor is such a
process: on two H200 machines of that kind, importing torch took 2.3 to 3.4 s, and torch with Inductor 8.0 to
10.7 s, against 1.3 to 1.5 s and 3.2 to 3.8 s once the caches were written (docs/measurement.md). Inline tuning pays it once, in
the driver; a Ray job pays it again in every actor before its first build.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

#: Packages every tuner actor imports before its first compile (torch, then Inductor's own imports).
PACKAGES = ("torch", "torch._inductor", "sympy", "triton", "ray")


def _cached(source: str) -> bool:
    try:
        return Path(importlib.util.cache_from_source(source)).is_file()
    except (NotImplementedError, ValueError):   # no cache tag, or a source that is not a .py file
        return True


def _writable(source: str) -> bool:
    """Whether an import of source could write its cache file."""
    if sys.flags.dont_write_bytecode:
        return False
    target = Path(sys.pycache_prefix) if sys.pycache_prefix else Path(source).parent
    while not target.exists() and target != target.parent:
        target = target.parent
    return os.access(target, os.W_OK)


def uncached(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """The installed packages of packages whose bytecode is not cached and that no import here will cache:
    every new process compiles them from source."""
    found = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        source = spec.origin if spec is not None else None
        if source and source.endswith(".py") and not _cached(source) and not _writable(source):
            found.append(name)
    return found


def advice(names: list[str]) -> str:
    """One line for a user: what is missing, what it costs, and the command that fixes it."""
    why = "PYTHONDONTWRITEBYTECODE is set" if sys.flags.dont_write_bytecode else "their folders are read-only"
    return (f"no cached bytecode for {', '.join(names)} and none will be written ({why}): every new Python "
            "process, each Ray tuner actor included, compiles them from source before its first build (seconds "
            "per actor). Write the caches once with: python -m compileall -q " + " ".join(folders(names)))


def folders(names: list[str]) -> list[str]:
    """The site folders that hold names (what `python -m compileall` should be given)."""
    out: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name.partition(".")[0])
        if spec is None or not spec.origin:
            continue
        origin = Path(spec.origin)
        site = str(origin.parent.parent if origin.name == "__init__.py" else origin.parent)
        if site not in out:
            out.append(site)
    return out
