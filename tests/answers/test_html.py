"""The HTML report in a real headless browser (Debian's ``chromium``): it renders (a screenshot
that is not blank), logs no console error, and the figures in its text equal the JSON report's.
Also checked: it loads nothing from the network (every resource is inline)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from acquisition.lineproto import LineEncoder
from acquisition.report.html import fmt
from tests.answers.runs import KnownRun

pytestmark = pytest.mark.slow

NRG = str(Path(sys.executable).with_name("nrg-collect"))
CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_CONSOLE = re.compile(r":CONSOLE[:(\]]")

if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("chromium is not installed (scripts/test.sh installs it)")
    pytest.skip("chromium is not installed here", allow_module_level=True)


def browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="nrg-chromium-") as profile:
        return subprocess.run(
            [CHROMIUM or "chromium", *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )


def console_messages(page: Path) -> list[str]:
    proc = browse(page, "--enable-logging=stderr", "--v=0", "--dump-dom")
    return [line for line in proc.stderr.splitlines() if _CONSOLE.search(line)]


class Tables(HTMLParser):
    """Rows of every table as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def nrg(*args: str) -> str:
    return subprocess.run(
        [NRG, *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout


@pytest.fixture
def data(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    for run, wall in (("r1", 70.0), ("r2", 90.0)):
        pts = KnownRun(run=run, wall_w=wall).points()
        (d / f"nrg-{run}.lp").write_text(LineEncoder().encode_many(pts))
    return d


def test_console_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('x'); nope();</script></body></html>")
    assert len(console_messages(bad)) == 2


def test_report_page(tmp_path: Path, data: Path) -> None:
    page = tmp_path / "r1.html"
    nrg("report", "--data", str(data), "r1", "--format", "html", "-o", str(page))
    summary = json.loads(nrg("report", "--data", str(data), "r1", "--format", "json"))
    text = page.read_text()
    # nothing to load at view time (namespace URIs are names, not loads)
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)|url\(\s*['\"]?https?:", text)
    assert "<link" not in text and "<img" not in text

    # it renders: a screenshot with content
    shot = tmp_path / "shot.png"
    browse(page, f"--screenshot={shot}", "--window-size=1280,2400")
    from matplotlib.image import imread

    pixels = imread(str(shot))[..., :3]
    non_white = (pixels < 0.95).any(axis=-1).mean()
    assert non_white > 0.02
    assert len({tuple(p) for p in pixels[::7, ::7].reshape(-1, 3).tolist()}) > 20

    assert console_messages(page) == []

    # the figures the browser shows are the JSON report's
    dom = browse(page, "--dump-dom").stdout
    parser = Tables()
    parser.feed(dom)
    rows = {r[0]: r[1:] for r in parser.rows if r}
    e = summary["energy"]
    assert rows["energy total (J)"] == [fmt(e["total_j"])]
    assert rows["energy total (kWh)"] == [fmt(e["total_kwh"], 6)]
    assert rows["energy outside steps (J)"] == [fmt(e["outside_steps_j"])]
    assert rows["mean power (W)"] == [fmt(e["mean_w"])]
    assert rows["CO2e (g)"] == [fmt(summary["co2e_g"])]
    assert rows["steps"] == [str(summary["steps"]["count"])]
    assert rows["energy per step, mean (J)"] == [fmt(summary["steps"]["energy_j"]["mean"])]
    for src in e["sources"]:
        assert rows[src["source"]][1] == fmt(src["energy_j"])
    for m in summary["modules"]:
        assert rows[m["module"]] == [fmt(m["energy_j"]), fmt(m["share"] * 100, 1)]
    for ep in summary["epochs"]:
        assert rows[str(ep["epoch"])] == [
            str(ep["steps"]),
            fmt(ep["duration_s"]),
            fmt(ep["energy_j"]),
        ]
    # and the page carries the same summary as data
    embedded = re.search(r"class=\"nrg-summary\">(.*?)</script>", dom, re.S)
    assert embedded is not None
    assert json.loads(embedded.group(1)) == summary
    assert dom.count("<svg") >= 4  # power, epochs, steps, modules


def test_compare_page(tmp_path: Path, data: Path) -> None:
    page = tmp_path / "cmp.html"
    nrg("compare", "--data", str(data), "r1", "r2", "--format", "html", "-o", str(page))
    result = json.loads(nrg("compare", "--data", str(data), "r1", "r2", "--format", "json"))
    assert console_messages(page) == []
    parser = Tables()
    parser.feed(browse(page, "--dump-dom").stdout)
    rows = {r[0]: r[1:] for r in parser.rows if r}
    energy = next(f for f in result["figures"] if f["name"] == "energy")
    cells = rows["energy (J)"]
    assert cells[0].startswith(f"{energy['values'][0]['value']:.3f}")
    assert f"{energy['values'][1]['diff_ratio']:+.1%}" in cells[1]
