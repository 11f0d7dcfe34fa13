"""The HTML report opened in a real headless Chromium: it renders, every image is an inline
PNG that decodes, no console error is logged, and the screenshot is not blank."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import numpy as np
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
    srcs = re.findall(r'<img[^>]*src="([^"]*)"', dom.stdout)
    assert len(srcs) >= 5  # gof, vpc, etas, trace, individual fits
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        png = mpimg.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert png.ndim == 3 and np.asarray(png).std() > 0.01
    for section in ("Estimates", "Goodness of fit", "Visual predictive check", "Individual fits"):
        assert section in dom.stdout
