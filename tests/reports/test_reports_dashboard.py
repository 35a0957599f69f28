"""The dashboard in a real headless Chromium: loads offline, no console error, shows the matrix.

CI needs the Debian packages ``chromium`` and ``chromium-driver`` and the pip package
``selenium``; without them these tests skip and say so.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,2400",
]


def _binary(*names: str) -> str | None:
    return next((found for name in names if (found := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install selenium)"
    )
    chromium = _binary("chromium", "chromium-browser", "google-chrome")
    driver_path = _binary("chromedriver", "chromium-driver")
    if chromium is None or driver_path is None:
        pytest.skip("headless browser absent: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=driver_path)
    driver = webdriver.Chrome(options=options, service=service)
    yield driver
    driver.quit()


def test_dashboard_loads_without_errors_and_shows_the_matrix(
    browser, history: Path, tmp_path: Path
) -> None:
    page = history / "dashboard.html"
    html = page.read_text()
    # Self-contained: the library is inline exactly once, nothing refers to a CDN.
    assert html.count("* plotly.js v") == 1
    assert 'src="http' not in html

    browser.get(page.as_uri())
    browser.implicitly_wait(10)
    assert browser.execute_script("return typeof window.Plotly") == "object"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []

    matrix = browser.execute_script(
        "const d = document.getElementById('matrix');"
        "return d && d.data ? {type: d.data[0].type, x: d.data[0].x, y: d.data[0].y,"
        " text: d.data[0].text} : null;"
    )
    assert matrix is not None and matrix["type"] == "heatmap"
    with (history / "latest_matrix.csv").open(newline="") as handle:
        latest = list(csv.DictReader(handle))
    assert set(matrix["y"]) == {r["behaviour"] for r in latest}
    assert set(matrix["x"]) == {f"{r['target']} {r['target_version']}" for r in latest}
    cells = {
        (y, x): matrix["text"][i][j]
        for i, y in enumerate(matrix["y"])
        for j, x in enumerate(matrix["x"])
    }
    for row in latest:
        column = f"{row['target']} {row['target_version']}"
        assert cells[(row["behaviour"], column)].split(" ")[0] == row["status"]
    # The grid is drawn: one SVG heatmap layer and a tick label per behaviour.
    drawn = browser.execute_script(
        "return [document.querySelectorAll('#matrix .hm').length,"
        " Array.from(document.querySelectorAll('#matrix .ytick text')).map(t => t.textContent)];"
    )
    assert drawn[0] >= 1
    assert set(drawn[1]) == {r["behaviour"] for r in latest}

    regressions = browser.find_element("id", "regressions").text
    assert "test_breaks" in regressions
    assert "test_flappy" in browser.find_element("id", "flaky").text
    for plot in ("trends", "durations"):
        assert browser.execute_script(f"return document.getElementById('{plot}').data.length") > 0
    shot = tmp_path / "dashboard.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    shutil.copy(shot, history.parent / "dashboard.png")  # kept for a human look
