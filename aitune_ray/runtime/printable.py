"""Output that cannot lie: a string that came from a file or a user (a module name, a backend, a path, an
error quoting one) is shown with its control characters written out, so that it cannot move the cursor,
recolour or rewrite what the terminal shows, or reorder the text around it.

Written out as escapes (``\\x1b``, ``\\x9b``, ``\\u202e``): C0 controls (but newline and tab in multi-line
text), DEL, C1 controls, the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) and marks
(U+200E, U+200F, U+061C), and the line and paragraph separators (U+2028, U+2029). Everything else is kept as
it is. Every place that prints or writes a report uses printable(): the command's output and log lines,
progress lines, the checkpoint inspection, and the Markdown and HTML reports (markdown_text() is the
Markdown form).
"""

from __future__ import annotations

import re

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_IN_LINE = re.compile(f"[{_CONTROLS}\t\n]")   # one line: newline and tab are written out too
_IN_LINES = re.compile(f"[{_CONTROLS}]")      # lines of text: newline and tab stay


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text, lines: bool = False) -> str:
    """str(text) with every control character written as an escape. lines: newlines (and tabs) stay, for
    text of several lines; a value put into a line is made printable without it."""
    return (_IN_LINES if lines else _IN_LINE).sub(_escape, str(text))


_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")   # an & that would start a character reference


def markdown_text(text, lines: bool = False) -> str:
    """text as Markdown shows it, for a string that may hold names: printable, a < written &lt; (never raw
    HTML), an & that would start a character reference written &amp;, and ](  written ]\\( (never a link or
    image of its own). lines=False: on one line (a line break is a space, as Markdown renders it within a
    paragraph); lines=True: a whole document's lines."""
    text = str(text) if lines else str(text).replace("\n", " ")
    out = _ENTITY.sub("&amp;", printable(text, lines=lines))
    return out.replace("<", "&lt;").replace("](", "]\\(")


def printable_tree(value):
    """value (plain data: dicts, lists, tuples, strings) with every string in it, keys too, printable()."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_tree(v) for v in value] if isinstance(value, list) else tuple(map(printable_tree, value))
    return value
