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


def _severe(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_dashboard_is_one_offline_file_and_shows_the_matrix(
    browser, history: Path, tmp_path: Path
) -> None:
    page = history / "dashboard.html"
    html = page.read_text()
    # Self-contained: nothing is fetched when it opens.
    assert 'src="http' not in html and "<link" not in html

    browser.get(page.as_uri())
    assert browser.execute_script("return window.shadowcheckRendered") is not None
    assert _severe(browser) == []

    latest = read_csv(history / "latest_matrix.csv")
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#matrix td.cell')).map(td =>"
        " [td.dataset.b, td.closest('table').querySelectorAll('thead th.target .tname')"
        "[Number(td.dataset.t)].textContent, td.textContent]);"
    )
    assert sorted(map(tuple, cells)) == sorted(
        (r["behaviour"], r["target"], r["status"]) for r in latest
    )
    # Rows in the catalogue's order: families CR, DI, PR, SN, XS, TO, then number.
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#matrix th.beh')).map(t => t.textContent)"
    )
    assert rows == ["CR-1", "CR-2", "DI-3", "PR-1", "SN-1", "SN-7"]
    # The version is a readable line of the column head, not a tiny full string.
    versions = browser.execute_script(
        "return Array.from(document.querySelectorAll('#matrix .tver')).map(v =>"
        " [v.textContent, parseFloat(getComputedStyle(v).fontSize)])"
    )
    assert [v for v, _ in versions] == ["1.0", "2.0"]
    assert all(size >= 13 for _, size in versions)

    assert "test_breaks" in browser.find_element("id", "regressions").text
    flaky = browser.find_element("id", "flaky")
    assert "test_flappy" in flaky.text
    # The flaky scenario links to its history row, which shows its last runs.
    link = flaky.find_element("link text", "test_flappy").get_attribute("href")
    anchor = link.split("#", 1)[1]
    squares = browser.execute_script(
        f"return Array.from(document.querySelectorAll('#{anchor} .sq')).map(s => s.title)"
    )
    alpha_flappy = ["passed", "failed", "passed", "error", "passed", "failed"]
    assert len(squares) == len(alpha_flappy)
    assert squares[1].startswith("a1 ") and "FAIL: assertion failed" in squares[1]
    assert "INCONCLUSIVE: setup crashed" in squares[3]
    shot = tmp_path / "dashboard.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    shutil.copy(shot, history.parent / "dashboard.png")  # kept for a human look


def test_clicking_a_matrix_cell_drills_down_to_its_scenarios(browser, history: Path) -> None:
    browser.get((history / "dashboard.html").as_uri())
    cell = browser.find_element("css selector", '#matrix td.cell[data-b="CR-1"][data-t="0"]')
    assert "Click for the scenarios" in cell.get_attribute("title")
    drill = browser.find_element("id", "drill")
    assert "test_once" not in drill.text
    cell.click()
    assert "CR-1 on alpha 1.0" in drill.text
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#drill table.drill tr')).slice(1)"
        ".map(tr => Array.from(tr.children).slice(0, 3).map(td => td.textContent))"
    )
    # alpha's latest run a5: test_steady passed, test_once failed (both tagged CR-1)
    assert sorted(map(tuple, rows)) == [
        ("test_once", "FAIL", "assertion failed"), ("test_steady", "PASS", ""),
    ]
    assert "cell selected" in cell.get_attribute("class")
    assert _severe(browser) == []


def test_run_list_and_stacked_bars(browser, history: Path) -> None:
    browser.get((history / "dashboard.html").as_uri())
    trends = read_csv(history / "trends.csv")
    listed = browser.execute_script(
        "return Array.from(document.querySelectorAll('#runs tbody tr'))"
        ".map(tr => Array.from(tr.children).map(td => td.textContent))"
    )
    newest_first = sorted(trends, key=lambda r: (r["started_at"], r["run_id"]), reverse=True)
    assert [row[3] for row in listed] == [r["run_id"] for r in newest_first]
    first = newest_first[0]
    assert listed[0][1:8] == [first[k] for k in ("target", "target_version", "run_id", "passed",
                                                  "failed", "errors", "skipped")]
    bars = browser.execute_script("return document.querySelectorAll('#bars rect').length")
    assert bars > len(trends)  # stacked: more than one segment for some runs
    # Choosing a target narrows both.
    browser.execute_script(
        "const s = document.getElementById('run-target'); s.value = 'beta';"
        "s.dispatchEvent(new Event('change'));"
    )
    beta = browser.execute_script(
        "return Array.from(document.querySelectorAll('#runs tbody tr td:nth-child(2)'))"
        ".map(td => td.textContent)"
    )
    assert beta == ["beta"] * sum(r["target"] == "beta" for r in trends)
    assert _severe(browser) == []


def test_time_axes_are_sane_for_any_span(browser, history: Path) -> None:
    browser.get((history / "dashboard.html").as_uri())
    ticks = browser.execute_script(
        "return Array.from(document.querySelectorAll('#durations text.tick'))"
        ".map(t => t.textContent)"
    )
    # The history spans six days: one label per day, dates only.
    assert ticks == [f"2025-04-0{d}" for d in range(1, 7)]
    day = 86_400_000
    spans = {
        "one second": (0, 1000),
        "one day": (1_700_000_000_000, 1_700_000_000_000 + day),
        "ten years": (0, 3650 * day),
    }
    for name, (lo, hi) in spans.items():
        labels = browser.execute_script(
            f"return window.shadowcheckTimeTicks({lo}, {hi}, 7).map(t => t[1])"
        )
        assert 2 <= len(labels) <= 8, (name, labels)
        assert len(set(labels)) == len(labels), (name, labels)
        assert not any(".999" in label or ".001" in label for label in labels), (name, labels)


def test_one_day_of_durations_gets_hour_labels(browser, tmp_path: Path) -> None:
    from datetime import date

    from reports.dashboard import DashboardData, render

    one_day = [
        {"target": "t", "scenario": f"s{i}", "classname": "c", "date": date(2025, 6, 1),
         "runs": 3, "p50_s": 0.5, "p95_s": 1.0 + i}
        for i in range(3)
    ]
    page = tmp_path / "one_day.html"
    page.write_text(render(DashboardData(durations=one_day)))
    browser.get(page.as_uri())
    ticks = browser.execute_script(
        "return Array.from(document.querySelectorAll('#durations text.tick'))"
        ".map(t => t.textContent)"
    )
    assert "06-01 00:00" in ticks
    assert all(len(t) == len("06-01 00:00") for t in ticks), ticks
    assert _severe(browser) == []


def test_drill_down_links_to_the_runs_certification_evidence(
    spark, browser, tmp_path: Path
) -> None:
    from reports_junit_helpers import DAY0, Case, write_junit

    from reports.build import build

    cert = "file:///srv/runs/7/certification.html"
    write_junit(
        tmp_path / "in" / "run.xml", run_id="r7", target="exim", version="4.96-1+deb12u2",
        started=DAY0,
        cases=[Case("s", "xs3_stranger[XS-3,CR-1]", "failed", verdicts="XS-3=PASS;CR-1=FAIL"),
               Case("s", "to2_idle[TO-2]", "not-applicable", verdicts="TO-2=NOT-APPLICABLE")],
        suite_properties={"shadowcheck.certification": cert},
    )
    build(spark, [str(tmp_path / "in")], str(tmp_path / "out"))
    browser.get((tmp_path / "out" / "dashboard.html").as_uri())
    browser.find_element("css selector", '#matrix td.cell[data-b="XS-3"]').click()
    drill = browser.find_element("id", "drill")
    assert "XS-3 on exim 4.96-1+deb12u2" in drill.text
    links = {a.text: a.get_attribute("href") for a in drill.find_elements("tag name", "a")}
    assert links == {
        "evidence": f"{cert}#behaviour-XS-3",
        "certification": f"{cert}#scenario-xs3_stranger[XS-3,CR-1]",
    }
    row = drill.find_element("css selector", "table.drill tr:nth-child(2)").text
    assert row.startswith("xs3_stranger[XS-3,CR-1] PASS")  # its own verdict, not the FAIL
    run_link = browser.find_element("css selector", "#runs tbody a").get_attribute("href")
    assert run_link == cert
    assert _severe(browser) == []
