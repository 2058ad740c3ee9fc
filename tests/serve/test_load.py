"""8 concurrent clients x 50 requests of every kind: no error, and no threads or file descriptors leaked."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.slow

CLIENTS, REQUESTS = 8, 50


def _client_session(base_url: str, gallery, seed: int) -> list[str]:
    """One client's 50 requests, cycling through upload, vector, id, item and thumbnail; returns the failures."""
    rng = np.random.default_rng(seed)
    failures = []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for i in range(REQUESTS):
            item = int(rng.integers(len(gallery.ids)))
            kind = i % 5
            if kind == 0:
                data = gallery.paths[item].read_bytes()
                response = client.post("/search", files={"image": ("q.png", data, "image/png")}, data={"k": "3"})
                expected = int(gallery.ids[item])
            elif kind == 1:
                response = client.post("/search", json={"vector": gallery.embeddings[item].tolist(), "k": 3})
                expected = int(gallery.ids[item])
            elif kind == 2:
                response = client.post("/search", json={"id": item, "k": 3})
                expected = None
            elif kind == 3:
                response = client.get(f"/items/{item}")
                expected = None
            else:
                response = client.get(f"/thumb/{item}")
                expected = None
            if response.status_code != 200:
                failures.append(f"{response.request.url}: {response.status_code} {response.text[:200]}")
            elif expected is not None and response.json()["results"][0]["id"] != expected:
                failures.append(f"{response.request.url}: top-1 is not item {expected}")
    return failures


def _round(base_url: str, gallery, seed: int) -> list[str]:
    with ThreadPoolExecutor(CLIENTS) as pool:
        sessions = pool.map(lambda c: _client_session(base_url, gallery, seed * CLIENTS + c), range(CLIENTS))
        return [failure for failures in sessions for failure in failures]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_concurrent_clients_get_correct_answers_and_nothing_leaks(base_url, gallery):
    assert _round(base_url, gallery, seed=0) == []  # warm-up: the threadpool grows to what 8 clients need
    threads, fds = threading.active_count(), _open_fds()
    assert _round(base_url, gallery, seed=1) == []
    # The server runs in this process, so its threads and sockets are counted here; clients are closed.
    assert threading.active_count() <= threads + 2, (threads, threading.active_count())
    assert _open_fds() <= fds + 2, (fds, _open_fds())
