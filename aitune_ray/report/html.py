"""The HTML report: one self-contained file (inline style, PNGs embedded as data URLs, no script, no
network), rendered from the document's blocks. It fits a 1280 px window: tables wrap their text instead of
scrolling, and each candidate's details are folded under its name."""

from __future__ import annotations

import base64
import html

from aitune_ray.report.links import log_link
from aitune_ray.runtime.printable import printable

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; padding: 0 1.5em; max-width: 76em; color: #222;
       line-height: 1.4; }
p, li { max-width: 60em; }
.answer { border-left: 0.35em solid #2e7d32; background: #f1f8f2; padding: 0.5em 1em; font-weight: 600;
          margin: 1em 0; }
.answer p { margin: 0.3em 0; }
.warning { border-left: 0.35em solid #c62828; background: #fdf1f1; padding: 0.5em 1em; margin: 1em 0; }
.warning h2 { font-size: 1em; margin: 0.3em 0; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f2f2f2; }
tr.chosen td { background: #e8f5e9; font-weight: 600; }
tr.rejected td, tr.failed td { color: #a00; }
tr.undecided td { color: #666; }
caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
details { margin: 0.2em 0; }
summary { cursor: pointer; }
details ul { margin: 0.3em 0 0.8em; }
img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; max-width: 60em; }
"""


def render(blocks: list[tuple], images: dict[str, bytes]) -> str:
    title = next((b[2] for b in blocks if b[0] == "heading"), "aitune-ray report")
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
             f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"]
    tables = 0
    for block in blocks:
        kind = block[0]
        if kind == "heading":
            parts.append(f"<h{block[1]}>{_e(block[2])}</h{block[1]}>")
        elif kind == "answer":
            parts.append("<div class=\"answer\" id=\"answer\">" + "".join(f"<p>{_e(x)}</p>" for x in block[1]) + "</div>")
        elif kind == "warning":
            parts.append(f"<div class=\"warning\" id=\"host\"><h2>{_e(block[1])}</h2><ul>"
                         + "".join(f"<li>{_e(x)}</li>" for x in block[2]) + "</ul></div>")
        elif kind == "facts":
            parts.append("<ul class=\"facts\">" + "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in block[1])
                         + "</ul>")
        elif kind == "list":
            parts.append("<ul class=\"reasons\">" + "".join(f"<li>{_e(x)}</li>" for x in block[2]) + "</ul>")
        elif kind == "text":
            parts.append(f"<p>{_e(block[1])}</p>")
        elif kind == "table":
            _, caption, head, rows, kinds = block
            css = "candidates" if caption == "candidates" else "plan"
            tables += 1
            parts.append(f"<table class=\"{css}\" id=\"{css}-{tables}\"><caption>{_e(caption)}</caption><thead><tr>"
                         + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>")
            for index, row in enumerate(rows):
                row_kind = kinds[index] if index < len(kinds) else ""
                parts.append(f"<tr class=\"{_e(row_kind)}\">" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
            parts.append("</tbody></table>")
        elif kind == "details":
            for title_text, facts in block[1]:
                parts.append(f"<details class=\"candidate\"><summary>{_e(title_text)}</summary><ul>"
                             + "".join(f"<li><b>{_e(k)}</b>: {_value(k, v)}</li>" for k, v in facts) + "</ul></details>")
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


def _value(name: str, value: str) -> str:
    target = log_link(name, value)
    return f"<a href=\"{_e(target)}\">{_e(value)}</a>" if target else _e(value)


def _e(text) -> str:
    """text as HTML shows it: printable (control characters and bidi overrides written out), then escaped."""
    return html.escape(printable(text, lines=True), quote=True)   # a line break is a space in HTML
