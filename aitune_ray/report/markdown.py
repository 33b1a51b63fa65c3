"""The Markdown report (and the CLI's summary): the document's blocks, with images as links to PNG files.

Every string of a block may hold names from the user's model, job or run records: each is written through
_md (runtime/printable.py's markdown_text: printable, no raw HTML, no link of its own), so that a name
renders as the text it is.
"""

from __future__ import annotations

from aitune_ray.report.links import log_link
from aitune_ray.runtime.printable import markdown_text


def render(blocks: list[tuple], image_files: dict[str, str] | None = None) -> str:
    image_files = image_files or {}
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            lines += ["#" * block[1] + " " + _md(block[2]), ""]
        elif kind == "answer":
            lines += [f"**{_md(line)}**" if len(block[1]) == 1 else f"- **{_md(line)}**" for line in block[1]] + [""]
        elif kind == "warning":
            lines += [f"> **{_md(block[1])}**", ">"] + [f"> - {_md(line)}" for line in block[2]] + [""]
        elif kind == "facts":
            lines += [f"- {_md(name)}: {_md(value)}" for name, value in block[1]] + [""]
        elif kind == "list":
            lines += [f"- {_md(line)}" for line in block[2]] + [""]
        elif kind == "text":
            lines += [_md(block[1]), ""]
        elif kind == "table":
            _, caption, head, rows = block[:4]
            lines += [f"**{_md(caption)}**", "", _row(head), "|" + "---|" * len(head)]
            lines += [_row(r) for r in rows] + [""]
        elif kind == "details":
            for title, facts in block[1]:
                lines += [f"#### {_md(title)}", ""]
                lines += [f"- {_md(name)}: {_link(name, value)}" for name, value in facts] + [""]
        elif kind == "image":
            _, name, caption = block
            if name in image_files:
                lines += [f"![{_md(name)}]({image_files[name]})", "", _md(caption), ""]
            else:
                lines += [f"(no {_md(name)} picture: nothing to draw)", ""]
    return "\n".join(lines)


def _md(text) -> str:
    return markdown_text(text)


def _link(name: str, value: str) -> str:
    target = log_link(name, value)
    return f"[{_md(value)}]({target})" if target else _md(value)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(_md(c).replace("|", "/") for c in cells) + " |"
