"""The HTML report: one self-contained file (inline style, PNGs embedded as data URLs, no script, no
network), rendered from the document's blocks."""

from __future__ import annotations

import base64
import html

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
tr.chosen td { background: #e8f5e9; font-weight: 600; }
tr.failed td { color: #a00; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; max-width: 60em; }
"""


def render(blocks: list[tuple], images: dict[str, bytes]) -> str:
    title = next((b[2] for b in blocks if b[0] == "heading"), "aitune-ray report")
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"]
    tables = 0
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            parts.append(f"<h{block[1]}>{_e(block[2])}</h{block[1]}>")
        elif kind == "facts":
            parts.append("<ul class=\"facts\">" + "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in block[1])
                         + "</ul>")
        elif kind == "text":
            parts.append(f"<p>{_e(block[1])}</p>")
        elif kind == "table":
            _, caption, head, rows = block
            css = "candidates" if caption == "candidates" else "plan"
            tables += 1
            parts.append(f"<table class=\"{css}\" id=\"{css}-{tables}\"><caption>{_e(caption)}</caption><thead><tr>"
                         + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>")
            for row in rows:
                parts.append(f"<tr class=\"{_row_class(head, row)}\">" + "".join(f"<td>{_e(c)}</td>" for c in row)
                             + "</tr>")
            parts.append("</tbody></table>")
        elif kind == "image":
            _, name, caption = block
            data = images.get(name)
            if data:
                source = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
                parts.append(f"<figure id=\"{_e(name)}\"><img alt=\"{_e(name)}\" src=\"{source}\">"
                             f"<figcaption>{_e(caption)}</figcaption></figure>")
            else:
                parts.append(f"<p>(no {_e(name)} picture: nothing to draw)</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _row_class(head: list[str], row: list[str]) -> str:
    if row and row[0].endswith("(chosen)"):
        return "chosen"
    status = row[head.index("status")] if "status" in head else ""
    return "failed" if status.strip() not in ("", "ok") else ""


def _e(text) -> str:
    return html.escape(str(text), quote=True)
