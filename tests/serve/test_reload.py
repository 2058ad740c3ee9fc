"""The service follows its index directory: `index add`/`remove` by another process show without a restart."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from retrieval.export.index_add import IndexAddRequest, add_to_index
from retrieval.index import SearchIndex
from retrieval.index.storage import writing
from retrieval.serve import create_app
from retrieval.serve.live import LiveIndex

_INTERVAL = 0.1


def _eventually(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the change did not show in time"
        time.sleep(0.05)


@pytest.mark.slow
def test_remove_and_add_by_other_processes_show_without_a_restart(gallery, tmp_path, serving, serve_limits):
    index_dir = tmp_path / "index"
    shutil.copytree(gallery.index_dir, index_dir)
    new = tmp_path / "new"
    new.mkdir()
    for i, colour in enumerate([(250, 0, 0), (0, 0, 250)]):
        Image.new("RGB", (40, 40), colour).save(new / f"added_{i}.png")
    app = create_app(index_dir, device="cpu", limits=serve_limits, image_root=tmp_path, reload_interval=_INTERVAL)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        count = client.get("/healthz").json()["vectors"]
        assert client.get("/items/3").status_code == 200

        remove = ["index", "remove", "--index", str(index_dir), "--ids", "3"]
        subprocess.run([sys.executable, "-m", "retrieval.cli.main", *remove], check=True, capture_output=True)
        _eventually(lambda: client.get("/items/3").status_code == 404)
        assert client.get("/healthz").json()["vectors"] == count - 1
        assert 3 not in [r["id"] for r in client.post("/search", json={"id": 4, "k": 100}).json()["results"]]

        add_to_index(IndexAddRequest(index_dir, images=new))  # what `index add --images NEW` runs
        _eventually(lambda: client.get("/healthz").json()["vectors"] == count + 1)
        added = client.get(f"/items/{count}").json()
        assert added["path"] == "new/added_0.png"
        upload = client.post("/search", files={"image": ("q.png", (new / "added_1.png").read_bytes(), "image/png")})
        assert upload.json()["results"][0]["id"] == count + 1


def test_a_request_keeps_the_version_it_started_with(gallery, tmp_path):
    index_dir = tmp_path / "index"
    shutil.copytree(gallery.index_dir, index_dir)
    live = LiveIndex(index_dir, lambda path, previous: SearchIndex.load(path), interval=_INTERVAL)
    before = live.current()
    with SearchIndex.edit(index_dir) as index:
        index.remove([0, 1])
    time.sleep(_INTERVAL)
    _eventually(lambda: live.current() is not before)
    assert live.generation == 1 and live.current().ntotal == before.ntotal - 2
    assert before.metadata_for([0])[0]["id"] == 0  # the old version is whole for whoever still holds it
    np.testing.assert_array_equal(before.search(before.reconstruct(1)[None], k=1)[1], [[1]])


def test_a_version_that_cannot_be_loaded_leaves_the_current_one_serving(gallery, tmp_path, serving, serve_limits):
    index_dir = tmp_path / "index"
    shutil.copytree(gallery.index_dir, index_dir)
    app = create_app(index_dir, device="cpu", limits=serve_limits, reload_interval=_INTERVAL)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        count = client.get("/healthz").json()["vectors"]
        manifest = index_dir / "manifest.json"
        good = manifest.read_text()
        manifest.write_text("{broken")
        time.sleep(5 * _INTERVAL)
        for _ in range(3):
            assert client.get("/healthz").json()["vectors"] == count
            assert client.post("/search", json={"id": 2, "k": 3}).status_code == 200
            time.sleep(_INTERVAL)
        manifest.write_text(good)
        with SearchIndex.edit(index_dir) as index:
            index.remove([5])
        _eventually(lambda: client.get("/healthz").json()["vectors"] == count - 1)


def test_eight_clients_search_through_adds_and_removes_without_a_server_error(gallery, tmp_path, serving, serve_limits):
    index_dir = tmp_path / "index"
    shutil.copytree(gallery.index_dir, index_dir)
    new = tmp_path / "new"
    new.mkdir()
    for i in range(3):
        Image.new("RGB", (40, 40), (80 * i, 250 - 80 * i, 120)).save(new / f"added_{i}.png")
    app = create_app(index_dir, device="cpu", limits=serve_limits, image_root=tmp_path, reload_interval=_INTERVAL)
    statuses: list[int] = []
    stop = threading.Event()

    def search(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                vector = rng.normal(size=gallery.embeddings.shape[1]).tolist()
                statuses.append(client.post("/search", json={"vector": vector, "k": 5}).status_code)
                statuses.append(client.post("/search", json={"id": int(rng.integers(5, 20)), "k": 5}).status_code)

    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        count = client.get("/healthz").json()["vectors"]
        with ThreadPoolExecutor(8) as pool:
            searching = [pool.submit(search, seed) for seed in range(8)]
            # What `index remove --ids 1 2` and `index add --images NEW` run.
            with writing(index_dir), SearchIndex.edit(index_dir) as index:
                index.remove(np.asarray([1, 2], dtype=np.int64))
            add_to_index(IndexAddRequest(index_dir, images=new))
            _eventually(lambda: client.get("/healthz").json()["vectors"] == count + 1)
            time.sleep(4 * _INTERVAL)  # searches keep running across the reload
            stop.set()
            for future in searching:
                future.result()
        assert statuses and all(status == 200 for status in statuses), sorted(set(statuses))
        assert client.get("/items/1").status_code == client.get("/items/2").status_code == 404
        upload = client.post("/search", files={"image": ("q.png", (new / "added_2.png").read_bytes(), "image/png")})
        assert upload.json()["results"][0]["id"] == count + 2
