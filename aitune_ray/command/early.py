"""The aitune-ray command's first check, made as the package is imported: a job file that is not there (or
cannot be read) is said before torch and the rest of the package load, which take 2 s on an idle machine and
up to a minute on a busy one. Only in the command's own process (its console script, or python -m
aitune_ray); anywhere else importing the package does nothing here.
"""

from __future__ import annotations

import os
import sys

EXIT_BAD_JOB = 2   # the command's exit status for a bad job (aitune_ray/command/cli.py)


def is_the_command() -> bool:
    """Whether this process is the aitune-ray command being started: its console script, or python -m aitune_ray
    (while -m locates the package, sys.argv[0] is "-m")."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "aitune-ray":
        return True
    orig = list(getattr(sys, "orig_argv", []))
    return argv0 == "-m" and any(a == "-m" and b in ("aitune_ray", "aitune_ray.command.cli")
                                 for a, b in zip(orig, orig[1:]))


def check_job_file() -> None:
    """In the command's process: read its arguments (as the command will) and, for tune, the job file's text;
    one error line and exit 2 where it cannot be read. Bad arguments, --help and --version end here as
    they would later."""
    if not is_the_command():
        return
    from aitune_ray.command.arguments import build_parser
    from aitune_ray.command.job_text import read_job_text
    from aitune_ray.errors import ConfigError
    from aitune_ray.runtime.printable import printable

    args = build_parser().parse_args(sys.argv[1:])
    if getattr(args, "command", None) != "tune":
        return
    try:
        read_job_text(args.job)
    except ConfigError as exc:
        print(printable(f"error: {args.job}: {exc}", lines=False), file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_JOB)
