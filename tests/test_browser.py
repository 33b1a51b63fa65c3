"""The HTML report in a real browser: headless Chromium opens it with the network cut off, takes a
screenshot, and the page's DOM (after loading) holds the candidates table and a decoded timeline image.

Needs a chromium (or google-chrome) binary; CI installs Debian's chromium when it is missing. Skipped
only where none is installed.
"""

from __future__ import annotations

import html.parser
import re
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from tests.report_helpers import REPO, run_quick_job

BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install -y chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--host-resolver-rules=MAP * ~NOTFOUND"]   # no network: the page must stand on its own
#: Added to a copy of the page only: writes each image's decoded size into the DOM for the dump.
PROBE = ("<script>window.addEventListener('load', function () { document.querySelectorAll('img').forEach("
         "function (i) { i.setAttribute('data-decoded', i.naturalWidth + 'x' + i.naturalHeight); }); });</script>")


class DomReader(html.parser.HTMLParser):
    """The parts of the dumped DOM the test checks: the candidates table's cells and the images."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[dict] = []
        self._figure = None
        self._in_candidates = False
        self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "candidates" in (attrs.get("class") or ""):
            self._in_candidates = True
            self.tables.append([])
        elif tag == "tr" and self._in_candidates:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self._in_candidates:
            self._cell = []
        elif tag == "figure":
            self._figure = attrs.get("id")
        elif tag == "img":
            self.images.append({**attrs, "figure": self._figure})

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_candidates = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "figure":
            self._figure = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def browser(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, *FLAGS, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    sys.path.insert(0, str(REPO))
    return run_quick_job(tmp_path_factory.mktemp("browser")).with_suffix(".html")


def test_chromium_renders_the_candidates_table_and_the_timeline(report, tmp_path):
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dumped = browser("--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = DomReader()
    dom.feed(dumped.stdout)
    (table,) = dom.tables
    head, rows = table[0], table[1:]
    assert head == ["candidate", "verdict", "speedup [95% interval]", "bs 4", "bs 16"]
    assert [r[0].split(" (")[0] for r in rows] == ["TorchEager", "RaisingBackend", "TorchEagerBackend"]
    assert [r[head.index("verdict")] for r in rows] == ["baseline", "error", "chosen"]
    images = {image["figure"]: image for image in dom.images}
    assert set(images) == {"speedup", "timeline"}
    width, height = (int(v) for v in images["timeline"]["data-decoded"].split("x"))
    assert width >= 600 and height >= 150                  # the embedded PNG decoded in the browser

    shot = tmp_path / "shot.png"
    done = browser(f"--screenshot={shot}", "--window-size=1280,1600", report.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1280, 1600)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 18)
        assert colours is None or len(colours) > 50       # the page painted text, table and pictures


#: Added to a copy of the page only: measures, once laid out, whether the page scrolls sideways and where
#: each summary table and each verdict cell ends, and writes it into the DOM for the dump.
LAYOUT = ("<script>window.addEventListener('load', function () { var w = window.innerWidth, out = [];"
          "document.querySelectorAll('table.candidates').forEach(function (t) {"
          " out.push('table ' + Math.ceil(t.getBoundingClientRect().right));"
          " t.querySelectorAll('tbody tr').forEach(function (r) { var c = r.cells[1], b = c.getBoundingClientRect();"
          "  out.push('verdict ' + Math.ceil(b.right) + ' ' + Math.round(b.width) + ' ' + (c.scrollWidth > c.clientWidth)"
          "   + ' ' + c.textContent.replace(/ /g, '_')); }); });"
          "document.body.setAttribute('data-layout', [w, document.documentElement.scrollWidth].concat(out).join(';'));"
          "});</script>")


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_summary_fits_the_window_and_every_verdict_shows(report, tmp_path, width):
    """A long decision (many candidates with long names and settings) still lays out without horizontal
    scrolling, and every verdict cell is inside the window, not clipped."""
    from aitune_ray.report import render_run_file
    import json

    run = json.loads(report.with_suffix(".json").read_text())
    module = run["report"]["modules"][0]
    template = module["results"][-1]
    for i in range(12):   # variants with long settings, as a real job's candidates have
        extra = dict(template, key=f"variant-{i}", backend=f"TorchInductorJitBackend",
                     spec={"type": "aitune_ray.backend:TorchInductorJitBackend",
                           "config": {"mode": "max-autotune-no-cudagraphs", "dynamic": bool(i % 2), "options":
                                      {"triton.cudagraphs": False, "epilogue_fusion": True, "variant": i}}})
        module["results"].append(extra)
        module.setdefault("verdicts", {})[extra["key"]] = {
            "passed": False, "verdict": "inconclusive, eager kept", "interval": {"median": 1.02, "low": 0.731, "high": 1.46},
            "intervals": {bs: {"median": 1.0, "low": 0.512, "high": 1.53} for bs in module["call_mix"]}}
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps(run))
    page = render_run_file(wide)["html"]
    probe = tmp_path / "layout.html"
    probe.write_text(page.read_text().replace("</body>", LAYOUT + "</body>"))
    dumped = browser(f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', dumped.stdout)
    assert found, dumped.stdout[-2000:]
    window, scroll, *parts = found[1].split(";")
    assert int(window) == width and int(scroll) <= width, found[1]         # nothing scrolls sideways
    tables = [int(p.split()[1]) for p in parts if p.startswith("table ")]
    verdicts = [p.split(" ", 4)[1:] for p in parts if p.startswith("verdict ")]
    assert tables and all(right <= width for right in tables), found[1]
    assert len(verdicts) == 1 + len(module["results"])                    # eager and every candidate
    for right, cell_width, clipped, text in verdicts:
        assert int(right) <= width and int(cell_width) > 0 and clipped == "false" and text, found[1]
