"""`min_score` on `/search` and the page: results below it are dropped, never padded; "stored" is the index's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.core.match_threshold import MatchThreshold
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.serve import create_app

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package, driven by Playwright as in test_page.py
STORED = {"score": 0.5, "target_fmr": 0.001, "chosen_on": "val", "test_fmr": 0.002, "test_fnmr": 0.1}


@pytest.fixture(scope="module")
def thresholded(tmp_path_factory, tiny_checkpoint, gallery):
    """The gallery's images indexed by the same weights, from a checkpoint that carries a match threshold."""
    root = tmp_path_factory.mktemp("thresholded")
    checkpoint = root / "best.pt"
    dataclasses.replace(Checkpoint.read(tiny_checkpoint), match_threshold=MatchThreshold(**STORED)).save(checkpoint)
    images = root / "images" / "gallery"
    images.mkdir(parents=True)
    for position, path in enumerate(gallery.paths):
        (images / f"{position:03d}.png").write_bytes(path.read_bytes())
    encoder = EncoderChoice(checkpoint=checkpoint)  # `index build --checkpoint CKPT --images DIR --type flat`
    build_index(IndexBuildRequest(root / "index", encoder, images=root / "images", kind="flat"))
    return root / "index"


@pytest.fixture(scope="module")
def client(thresholded, serving, serve_limits):
    with serving(create_app(thresholded, device="cpu", limits=serve_limits)) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client


def test_index_build_copies_the_checkpoint_threshold_into_the_manifest_and_info(thresholded, client):
    assert SearchIndex.load(thresholded).manifest.as_dict()["match_threshold"] == STORED
    assert client.get("/info").json()["match_threshold"] == STORED


def test_results_below_min_score_are_dropped_not_padded(client, gallery):
    query = np.random.default_rng(0).normal(size=gallery.embeddings.shape[1])
    scores, ids = gallery.exact(query / np.linalg.norm(query), len(gallery.ids))
    minimum = float((scores[2] + scores[3]) / 2)  # three items pass
    answer = client.post("/search", json={"vector": query.tolist(), "k": 10, "min_score": minimum}).json()
    assert answer["min_score"] == minimum and answer["k"] == 10
    positions = np.searchsorted(gallery.ids, ids[:3])  # the copies are named by position in the gallery
    assert [r["path"] for r in answer["results"]] == [f"{position:03d}.png" for position in positions]
    nothing = client.post("/search", json={"vector": query.tolist(), "min_score": float(scores[0]) + 1e-3}).json()
    assert nothing["results"] == [] and nothing["min_score"] == pytest.approx(float(scores[0]) + 1e-3)
    every = client.post("/search", json={"vector": query.tolist(), "k": 5}).json()
    assert every["min_score"] is None and len(every["results"]) == 5


def test_stored_min_score_is_the_manifest_threshold_for_uploads_and_ids(client, gallery):
    upload = client.post(
        "/search",
        files={"image": ("q.png", gallery.paths[4].read_bytes(), "image/png")},
        data={"k": "20", "min_score": "stored"},
    ).json()
    scores, _ = gallery.exact(gallery.embeddings[4], len(gallery.ids))
    assert upload["min_score"] == STORED["score"]
    passing = [min(20, int(np.sum(scores >= STORED["score"] + margin))) for margin in (1e-4, -1e-4)]
    assert passing[0] <= len(upload["results"]) <= passing[1]
    assert all(result["score"] >= STORED["score"] for result in upload["results"])
    by_id = client.post("/search", json={"id": 4, "k": 20, "min_score": "stored"}).json()
    assert all(result["score"] >= STORED["score"] for result in by_id["results"]) and by_id["min_score"] == 0.5


@pytest.mark.parametrize("value", [1.5, "high", True, [0.5], "١", "٠.٥"])
def test_a_bad_min_score_is_a_400_naming_the_range(client, value):
    response = client.post("/search", json={"id": 1, "min_score": value})
    assert response.status_code == 400 and "min score must be a cosine in [-1, 1]" in response.json()["error"]


def test_stored_on_an_index_without_a_threshold_says_how_to_store_one(base_url):
    response = httpx.post(f"{base_url}/search", json={"id": 1, "min_score": "stored"}, timeout=30)
    assert response.status_code == 400 and "--save-threshold 1e-3" in response.json()["error"]


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.is_file(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_page_applies_the_stored_threshold_and_says_when_nothing_matches(client, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    noise = tmp_path / "noise.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(noise)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(str(client.base_url))
            page.wait_for_function("document.getElementById('min-score').value === '0.5000'")
            page.fill("#min-score", "1")  # above any other image's score
            page.set_input_files("#file", str(noise))
            page.wait_for_function("document.getElementById('status').textContent.startsWith('no match above')")
            assert page.locator("#status").inner_text().startswith("no match above 1.0000 for noise.png")
            assert page.locator(".result").count() == 0 and page.locator("#error").is_hidden()
        finally:
            browser.close()
