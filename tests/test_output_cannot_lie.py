"""Output that cannot lie: a string from a file or a user (a checkpoint's module name, a backend's, a run
record's error) is printed and reported with its control characters written out (C0, DEL, C1, the bidi
overrides and isolates), and Markdown and HTML reports show names as text, never as HTML or a link."""

from __future__ import annotations

import io
import json
import re

import pytest

from aitune_ray.checkpoint import save_checkpoint
from aitune_ray.command.cli import main
from aitune_ray.command.progress import ProgressView
from aitune_ray.report import summary, write_reports
from aitune_ray.runtime.printable import printable
from tests.test_checkpoint import edit_manifest, mlp, onnx_backend, tuned
from tests.test_report_answer import module

#: What a terminal or a renderer acts on: none may reach the output raw (a newline only between lines).
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

# Erase the line, go back to its start, and print what a JIT checkpoint's line would say; hide the rest.
FAKE_LINE = ("\x1b[2K\r" + "module (the whole model) named 'encoder', tuned on cpu: TorchInductorJitBackend "
             "(JIT: rebuilt at load)\x1b[8m")


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x08", "\r", "\x1b", "\x7f", "\x85", "\x9b", "\u202a", "\u202e",
                                  "\u2066", "\u2069", "\u200f", "\u2028"])
def test_every_control_character_is_written_out(char):
    shown = printable(f"a{char}b")
    assert not RAW.search(shown) and shown.startswith("a\\") and shown.endswith("b")
    assert printable(f"a{char}b\nc", lines=True).endswith("b\nc")


def test_plain_text_is_kept_as_it_is():
    text = "encoder.layers[0] -> TorchInductorJitBackend: 1.4x [1.2, 1.6], Größe 模型 ü"
    assert printable(text) == text and printable("a\nb\tc", lines=True) == "a\nb\tc"
    assert printable("a\nb") == "a\\x0ab"


def test_inspect_shows_an_aot_checkpoint_as_aot_whatever_its_names_hold(tmp_path, capsys):
    path = tmp_path / "m.ait"
    save_checkpoint(tuned(mlp(), onnx_backend(), name="encoder"), path)
    # the hash recomputed: the file passes every check; its strings are what a hostile author chose
    edit_manifest(path, lambda m: m["modules"][0].update(name="encoder" + FAKE_LINE, device="cpu:\n" + FAKE_LINE[5:]))
    assert main(["inspect", str(path)]) == 0
    printed = capsys.readouterr().out
    assert not RAW.search(printed), repr(printed)
    (line,) = [x for x in printed.splitlines() if x.startswith("module ")]
    assert line.endswith("ONNXRuntimeBackend (AOT: artifact loaded)") and "\\x1b[2K" in line
    assert main(["inspect", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert not RAW.search(out) and json.loads(out)["modules"][0]["name"] == "encoder" + FAKE_LINE


def hostile_module() -> dict:
    data = module(module="enc<img src=x onerror=alert(1)>\u202e" + FAKE_LINE)
    data["results"][3]["error"] = "it raised [click](javascript:alert(1)) &#x202e; <script>alert(1)</script>\n# title"
    data["results"][3]["log_path"] = "javascript:alert(1)"
    return data


def test_reports_and_the_summary_show_names_as_text(tmp_path):
    written = write_reports({"report": {"modules": [hostile_module()]}}, tmp_path / "r.md")
    text, page = written["md"].read_text(), written["html"].read_text()
    markdown = (text, summary({"modules": [hostile_module()]}))
    for out in (page, *markdown):
        assert not RAW.search(out), repr(out)
        assert "<img src=x" not in out and "<script" not in out
        assert "](javascript" not in out or out is page   # in HTML, Markdown's link syntax is text
        assert "&#x202e;" not in out.replace("&amp;#x202e;", "")   # no character reference left to act
        assert "\\u202e" in out and "\\x1b[2K" in out
    assert "# title" not in [line.strip() for line in text.splitlines()]   # a name cannot start a line
    assert 'href="javascript' not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_progress_lines_are_one_printable_line_each():
    stream = io.StringIO()
    view = ProgressView(stream, live=False)
    view({"event": "building", "module": "enc" + FAKE_LINE, "backend": "X\nFAKE done", "node": "n\u202e1"})
    printed = stream.getvalue()
    assert printed.count("\n") == 1 and not RAW.search(printed), repr(printed)


def test_the_live_tables_cells_are_printable_and_not_markup():
    pytest.importorskip("rich")
    from rich.console import Console

    view = ProgressView(io.StringIO(), live=False)
    view({"event": "building", "module": "enc[red]" + FAKE_LINE, "backend": "X\u202e"})
    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(view.table())
    assert not RAW.search(out.getvalue()) and "enc[red]" in out.getvalue()


def test_an_error_quoting_a_name_is_one_printable_line(tmp_path, capsys):
    job = tmp_path / "job\x1b[2Kx.yaml"
    job.write_text("model: 1\n")
    assert main(["tune", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and not RAW.search(err), repr(err)
