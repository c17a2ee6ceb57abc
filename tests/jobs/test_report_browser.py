"""The report as a reader sees it: headless Chromium at a 1400 px window.

Asserts the sections, the rendered width of every figure (page width, not a 545 px thumbnail),
and no `NaN` in the page text or figures.json; keeps a screenshot (its path is printed, under
pytest's tmp dir). `make test` installs Debian's chromium (`make browser`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.report.render import ReportInputs, render_report
from tests.jobs.test_report_defects import HEADER, _evaluation, _map_points

SECTIONS = ("summary", "ldp", "synthesis-study", "mobility", "attacks", "privacy", "map",
            "training", "runs")
# After load, write what the layout computed into the DOM, which --dump-dom prints.
PROBE = """<script>addEventListener('load', () => {
  const out = document.createElement('pre'); out.id = 'probe';
  out.textContent = JSON.stringify({
    widths: [...document.images].map(i => i.getBoundingClientRect().width),
    natural: [...document.images].map(i => i.naturalWidth),
    sections: [...document.querySelectorAll('section')].map(s => s.id),
    text: document.body.innerText});
  document.body.appendChild(out);});</script>"""


def _chromium(browser: str, tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1400,4000", "--virtual-time-budget=5000", *args],
        check=True, timeout=120, capture_output=True, text=True)
    return done.stdout


@pytest.mark.slow
def test_report_reads_at_page_width_in_headless_chromium(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed: `make browser` installs Debian's chromium")
    training = pd.DataFrame([(r, m, float(v)) for r in range(1, 6)
                             for m, v in (("released reward (mean)", 0.5 + r / 20),
                                          ("epsilon spent", r * 1.9))],
                            columns=["round", "metric", "value"])
    rng = np.random.default_rng(0)
    locations = pd.DataFrame({"lat": 31.2 + rng.normal(0, 0.08, 400),
                              "lon": 121.4 + rng.normal(0, 0.08, 400)})
    privacy = pd.DataFrame([{"source": "collection", "epsilon": 2.5, "delta": 0.0, "p90": None}])
    inputs = ReportInputs("d", _evaluation(with_attacks=True), _map_points(), training,
                          privacy, header=HEADER, locations=locations)
    html_path, json_path = render_report(inputs, tmp_path / "r")
    json.loads(json_path.read_text(), parse_constant=lambda t: pytest.fail(f"{t} in JSON"))

    probed = tmp_path / "probed.html"
    probed.write_text(html_path.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium(browser, tmp_path, "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run: no layout figures from the browser"
    import html as html_lib

    probe = json.loads(html_lib.unescape(found.group(1)))
    assert probe["sections"] == list(SECTIONS)
    assert len(probe["widths"]) == 4
    assert all(w >= 1200 for w in probe["widths"]), probe["widths"]  # 545 px before
    assert all(n >= 1200 for n in probe["natural"]), probe["natural"]  # not upscaled
    assert not re.search(r"\bnan\b", probe["text"], re.IGNORECASE)
    for heading in ("Summary", "Mobility divergences", "Privacy spent", "Warning"):
        assert heading in probe["text"]

    shot = tmp_path / "report.png"
    _chromium(browser, tmp_path, f"--screenshot={shot}", html_path.as_uri())
    print(f"report screenshot: {shot}")
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[1] == 1400
    rgb = (pixels[..., :3] * 255).astype(int).reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 50  # plots and text, not a blank page
