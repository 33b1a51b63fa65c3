"""How a benchmark hands on its table: printed, and with --out written there, its numbers as JSON beside it."""

from __future__ import annotations

import json
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
