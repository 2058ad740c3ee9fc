"""The search page in headless Chromium (Debian's package, driven by Playwright): upload, results, click."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.is_file(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    ),
]


def _thumbnails_loaded(page) -> bool:
    return page.evaluate(
        "() => [...document.querySelectorAll('.result img')].every((img) => img.complete && img.naturalWidth > 0)"
    )


def test_upload_shows_thumbnails_and_clicking_one_searches_with_it(base_url, gallery, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(base_url)
            page.wait_for_function("document.getElementById('info').textContent.includes('vectors')")
            # the filter's placeholder comes from this index's columns, not the digits demo's
            assert page.locator("#filter").get_attribute("placeholder") == "e.g. label = 'x' and split = 'x'"

            page.set_input_files("#file", str(gallery.paths[6]))
            page.wait_for_function("document.querySelectorAll('.result').length === 10")
            page.wait_for_function(
                "[...document.querySelectorAll('.result img')].every((i) => i.complete && i.naturalWidth > 0)"
            )
            cards = page.locator(".result")
            assert cards.first.get_attribute("data-id") == str(gallery.ids[6])  # the image itself comes first
            assert "1.0000" in cards.first.inner_text()
            assert "split: " in cards.first.inner_text()  # the metadata columns besides label
            assert _thumbnails_loaded(page)

            clicked = cards.nth(2).get_attribute("data-id")
            cards.nth(2).click()
            page.wait_for_function(f"document.getElementById('status').textContent.includes('item {clicked}')")
            page.wait_for_function(
                "[...document.querySelectorAll('.result img')].every((i) => i.complete && i.naturalWidth > 0)"
            )
            ids = [cards.nth(i).get_attribute("data-id") for i in range(cards.count())]
            assert clicked not in ids and len(ids) == 10  # more like this leaves the clicked item out
            assert page.locator("#preview").get_attribute("src") == f"/thumb/{clicked}"

            screenshot = tmp_path / "search_page.png"
            page.screenshot(path=str(screenshot), full_page=True)
            assert screenshot.stat().st_size > 10_000
            assert errors == [] and page.locator("#error").is_hidden()
        finally:
            browser.close()


def test_a_new_filter_count_or_minimum_score_searches_again(base_url, gallery):
    """Results of the old settings never stay under the new ones: Enter in the filter, or a changed control."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(base_url)
            page.wait_for_function("document.getElementById('info').textContent.includes('vectors')")
            page.set_input_files("#file", str(gallery.paths[6]))
            page.wait_for_function("document.querySelectorAll('.result').length === 10")
            cards = page.locator(".result")
            assert any("split: train" in cards.nth(i).inner_text() for i in range(10))

            page.fill("#filter", "split = 'test'")
            page.press("#filter", "Enter")
            page.wait_for_function(
                "[...document.querySelectorAll('.result')].every((c) => c.innerText.includes('split: test'))"
            )
            assert cards.count() == 10  # 12 test images pass

            page.select_option("#k", "5")
            page.wait_for_function("document.querySelectorAll('.result').length === 5")
            assert all("split: test" in cards.nth(i).inner_text() for i in range(5))

            page.fill("#min-score", "1")
            page.dispatch_event("#min-score", "change")
            page.wait_for_function("document.getElementById('status').textContent.startsWith('no match above')")
            assert cards.count() == 0  # the image is in the train split, which the filter leaves out
            assert errors == [] and page.locator("#error").is_hidden()
        finally:
            browser.close()
