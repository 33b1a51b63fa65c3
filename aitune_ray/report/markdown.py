"""The Markdown report: the document's blocks, with images as links to PNG files next to it."""

from __future__ import annotations


def render(blocks: list[tuple], image_files: dict[str, str]) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            lines += ["#" * block[1] + " " + block[2], ""]
        elif kind == "facts":
            lines += [f"- {name}: {value}" for name, value in block[1]] + [""]
        elif kind == "text":
            lines += [block[1], ""]
        elif kind == "table":
            _, caption, head, rows = block
            lines += [f"**{caption}**", "", _row(head), "|" + "---|" * len(head)]
            lines += [_row(r) for r in rows] + [""]
        elif kind == "image":
            _, name, caption = block
            if name in image_files:
                lines += [f"![{name}]({image_files[name]})", "", caption, ""]
            else:
                lines += [f"(no {name} picture: nothing to draw)", ""]
    return "\n".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/").replace("\n", " ") for c in cells) + " |"
