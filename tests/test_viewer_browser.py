"""The viewer in a real browser: Debian's headless `chromium`, driven through `chromedriver` by
selenium: the tree and its search box, a tensor page with its histogram, a table page and its next
page, the diff page. Skips with a reason where selenium, chromium or chromedriver is missing.

Screenshots: ZARCHIVE_VIEWER_SCREENSHOTS=docs/images writes the PNGs the docs show (docs/viewer.md)
there; otherwise they go to a temporary folder (and are checked to be PNGs).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from viewer_helpers import run_archive, serving

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)")  # fmt: skip


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("ZARCHIVE_VIEWER_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("browser")
    return run_archive(d / "run.zarc"), run_archive(d / "run-later.zarc", seed=1, scale=0.05)


def snap(driver, shots: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    path = shots / f"viewer-{name}.png"
    driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tree_and_search(browser, archives, shots) -> None:  # type: ignore[no-untyped-def]
    with serving(archives[0]) as (server, _):
        browser.get(server.url)
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.node")
        assert len(rows) > 10
        snap(browser, shots, "overview")
        box = browser.find_element(By.ID, "search")
        box.send_keys("layers.2")
        visible = [r.get_attribute("data-path") for r in rows if r.is_displayed()]
        assert visible == ["/model/layers.2.weight"]
        box.clear()
        box.send_keys("model/")
        browser.execute_script("document.getElementById('tree').scrollIntoView()")
        snap(browser, shots, "tree")
        browser.find_element(By.LINK_TEXT, "layers.2.weight").click()
        assert "/model/layers.2.weight" in browser.find_element(By.TAG_NAME, "h1").text


def test_tensor_page_with_its_histogram(browser, archives, shots) -> None:  # type: ignore[no-untyped-def]
    with serving(archives[0]) as (server, _):
        browser.get(server.url + "a/0/node?" + urllib.parse.urlencode({"path": "model/layers.1.weight"}))
        bars = browser.find_elements(By.CSS_SELECTOR, "svg.histogram rect.bar")
        assert len(bars) == 40
        assert browser.find_element(By.CSS_SELECTOR, "svg.histogram").size["width"] > 300
        assert browser.find_elements(By.CSS_SELECTOR, "svg.heatmap rect")
        assert browser.find_element(By.ID, "stat-NaN").text == "0"
        snap(browser, shots, "tensor")


def test_table_page(browser, archives, shots) -> None:  # type: ignore[no-untyped-def]
    with serving(archives[0]) as (server, _):
        browser.get(server.url + "a/0/node?path=metrics")
        assert browser.find_elements(By.CSS_SELECTOR, "svg.lineplot polyline.series")
        first = browser.find_elements(By.CSS_SELECTOR, "table.rows tr")[1].text
        snap(browser, shots, "table")
        browser.find_element(By.ID, "next-page").click()
        assert browser.find_elements(By.CSS_SELECTOR, "table.rows tr")[1].text.startswith("50 ")
        assert first.startswith("0 ")


def test_diff_page(browser, archives, shots) -> None:  # type: ignore[no-untyped-def]
    with serving(*archives) as (server, _):
        browser.get(server.url)
        browser.find_element(By.ID, "diff-link").click()
        bars = browser.find_elements(By.CSS_SELECTOR, "svg.barchart rect.bar")
        assert len(bars) >= 5
        assert "changed" in browser.find_element(By.ID, "diff-summary").text
        snap(browser, shots, "diff")
