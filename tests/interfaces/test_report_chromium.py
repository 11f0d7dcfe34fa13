"""The HTML report opened in a real headless Chromium: it renders, every figure is an inline
SVG that is well-formed XML, no console error is logged, and the screenshot is not blank."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,  # a fit through the command line, then a browser
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (`apt-get install chromium`; .ci/run installs it)",
    ),
]


def _chromium(*args, profile):
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_report_renders_in_chromium(fitted, tmp_path):
    import matplotlib.image as mpimg

    html_path = fitted / "report.html"
    text = html_path.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text
    url = html_path.resolve().as_uri()

    shot = tmp_path / "report.png"
    r = _chromium(
        f"--screenshot={shot}",
        "--window-size=1200,2000",
        "--enable-logging=stderr",
        "--v=0",
        url,
        profile=tmp_path / "p1",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln]
    assert console == [], console
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1200)
    assert img.std() > 0.02  # not a blank page

    dom = _chromium("--dump-dom", url, profile=tmp_path / "p2")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<img" not in dom.stdout
    svgs = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)
    assert len(svgs) >= 5  # gof, vpc, etas, trace, individual fits
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed, with drawn paths and labelled axes (inline
        # SVG in HTML needs no namespace, nor any address: the report names none)
        assert root.get("role") == "img" and root.get("aria-label")
        assert root.findall(".//path") and root.findall(".//text")
    for section in ("Estimates", "Goodness of fit", "Visual predictive check", "Individual fits"):
        assert section in dom.stdout


# the sections issue 27 added or redrew; each must render, with a size, and not blank
NEW_SECTIONS = ("run-record", "covariance", "gof", "npde", "random-effects", "vpc",
                "individual-fits")  # fmt: skip

_MEASURE = """<script>
const out = {};
for (const id of %s) {
  const e = document.getElementById(id);
  if (e) { const r = e.getBoundingClientRect(); out[id] = [r.width, r.height]; }
}
document.body.insertAdjacentHTML("beforeend", '<pre id="sizes">' + JSON.stringify(out) + "</pre>");
</script>"""


def test_new_sections_render_with_a_size_and_are_not_blank(fitted, tmp_path):
    """Each new section has a non-zero box in the rendered page, and a screenshot of the page
    with only that section shown is not blank. (A copy of the report gets the measuring
    script; the report itself has none.)"""
    import json

    import matplotlib.image as mpimg

    text = (fitted / "report.html").read_text()
    measured = tmp_path / "measured.html"
    measured.write_text(text.replace("</body>", _MEASURE % json.dumps(NEW_SECTIONS) + "</body>"))
    dom = _chromium(
        "--dump-dom", "--window-size=1200,2000", measured.resolve().as_uri(), profile=tmp_path / "m"
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    # (the last match: the first is the script's own text)
    sizes = json.loads(re.findall(r'<pre id="sizes">(\{.*?\})</pre>', dom.stdout)[-1])
    for sid in NEW_SECTIONS:
        w, h = sizes[sid]
        assert w > 100 and h > 50, (sid, w, h)
    for sid in NEW_SECTIONS:
        only = tmp_path / f"{sid}.html"
        css = f"<style>body > *:not(#{sid}){{display:none !important}}</style></head>"
        only.write_text(text.replace("</head>", css, 1))
        shot = tmp_path / f"{sid}.png"
        r = _chromium(
            f"--screenshot={shot}", "--window-size=1200,1400", only.resolve().as_uri(),
            profile=tmp_path / f"p-{sid}",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        img = mpimg.imread(shot)[..., :3]
        ink = (img < 0.9).any(axis=-1)  # pixels that are not near-white
        assert img.std() > 0.02 and ink.mean() > 0.01, (sid, img.std(), ink.mean())
