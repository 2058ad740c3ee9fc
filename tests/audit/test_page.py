"""The report page in headless Chromium (Debian's package, driven by Playwright): sections, thumbnails, no errors."""

from __future__ import annotations

import pytest

from retrieval.audit.findings import audit_embeddings
from retrieval.audit.report import write_report
from retrieval.config import AuditConfig
from tests.serve.test_page import CHROMIUM, CHROMIUM_ARGS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.is_file(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
    ),
]


def test_report_page_shows_every_section_with_loaded_thumbnails(planted, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report", limit=6)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto((tmp_path / "report" / "index.html").as_uri())
            titles = page.locator("section h2").all_inner_texts()
            assert [title.split(" (")[0] for title in titles] == [
                "Exact duplicates",
                "Near-duplicates",
                "Leaks between splits",
                "Likely label errors",
                "Outliers",
                "Most confused classes",
            ]
            leak = page.locator("#leaks .finding")
            assert leak.count() == 1 and leak.locator("img").count() == 2  # the test copy and its train source
            assert "test" in leak.inner_text() and "train" in leak.inner_text()
            loaded = page.evaluate(
                "() => [...document.querySelectorAll('.finding img')].every((i) => i.complete && i.naturalWidth > 0)"
            )
            assert loaded
            # the search page's look: its card style applies
            assert page.locator(".finding .result").first.evaluate("(e) => getComputedStyle(e).borderRadius") == "8px"
            screenshot = tmp_path / "audit_page.png"
            page.screenshot(path=str(screenshot), full_page=True)
            assert screenshot.stat().st_size > 10_000
            assert errors == []
        finally:
            browser.close()
