"""The HTML report in a real browser: headless Chromium opens it with the network cut off, takes a
screenshot, and the page's DOM (after loading) holds the candidates table and a decoded timeline image.

Needs a chromium (or google-chrome) binary; CI installs Debian's chromium when it is missing. Skipped
only where none is installed.
"""

from __future__ import annotations

import html.parser
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
    assert head[:3] == ["backend", "config", "status"]
    assert [r[0] for r in rows] == ["TorchEager (baseline)", "RaisingBackend", "TorchEagerBackend (chosen)"]
    assert rows[1][head.index("status")] == "error"
    images = {image["figure"]: image for image in dom.images}
    assert set(images) == {"throughput", "timeline"}
    width, height = (int(v) for v in images["timeline"]["data-decoded"].split("x"))
    assert width >= 600 and height >= 150                  # the embedded PNG decoded in the browser

    shot = tmp_path / "shot.png"
    done = browser(f"--screenshot={shot}", "--window-size=1280,1600", report.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1280, 1600)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 18)
        assert colours is None or len(colours) > 50       # the page painted text, table and pictures
