"""The text of a job file, read with its size limit. Light on purpose (aitune_ray/command/early.py reads it as the
package is imported); aitune_ray/command/job.py parses it."""

from __future__ import annotations

from pathlib import Path

from aitune_ray.errors import ConfigError

#: A job file is a page of settings: a larger one is refused before it is parsed.
MAX_JOB_BYTES = 1 << 20


def read_job_text(path: Path) -> str:
    """The text of a job file of at most MAX_JOB_BYTES (more is never read); ConfigError otherwise."""
    try:
        with open(path, "rb") as src:
            data = src.read(MAX_JOB_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read job file {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_JOB_BYTES:
        raise ConfigError(f"job file {path} is larger than {MAX_JOB_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"job file {path} is not UTF-8 text (byte {exc.start})") from None
