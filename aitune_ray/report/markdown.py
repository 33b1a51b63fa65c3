"""The Markdown report (and the CLI's summary): the document's blocks, with images as links to PNG files."""

from __future__ import annotations


def render(blocks: list[tuple], image_files: dict[str, str] | None = None) -> str:
    image_files = image_files or {}
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            lines += ["#" * block[1] + " " + block[2], ""]
        elif kind == "answer":
            lines += [f"**{line}**" if len(block[1]) == 1 else f"- **{line}**" for line in block[1]] + [""]
        elif kind == "warning":
            lines += [f"> **{block[1]}**", ">"] + [f"> - {line}" for line in block[2]] + [""]
        elif kind == "facts":
            lines += [f"- {name}: {value}" for name, value in block[1]] + [""]
        elif kind == "list":
            lines += [f"- {line}" for line in block[2]] + [""]
        elif kind == "text":
            lines += [block[1], ""]
        elif kind == "table":
            _, caption, head, rows = block[:4]
            lines += [f"**{caption}**", "", _row(head), "|" + "---|" * len(head)]
            lines += [_row(r) for r in rows] + [""]
        elif kind == "details":
            for title, facts in block[1]:
                lines += [f"#### {title}", ""] + [f"- {name}: {_link(name, value)}" for name, value in facts] + [""]
        elif kind == "image":
            _, name, caption = block
            if name in image_files:
                lines += [f"![{name}]({image_files[name]})", "", caption, ""]
            else:
                lines += [f"(no {name} picture: nothing to draw)", ""]
    return "\n".join(lines)


def _link(name: str, value: str) -> str:
    return f"[{value}]({value})" if name == "log" else value


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/").replace("\n", " ") for c in cells) + " |"
