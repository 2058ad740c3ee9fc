"""The gallery (`gallery` in tests/conftest.py, an index of a tiny checkpoint), served by a real uvicorn server on
an ephemeral loopback port; `tests/serve/serving.py` runs `retrieval serve` as a process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn

from retrieval.serve import ServeLimits, create_app
from tests.serve.serving import serve_process as _serve_process


@contextmanager
def _serving(app) -> Iterator[str]:
    """Run `app` with uvicorn in a thread on 127.0.0.1 and a free port; yields the base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        thread.join(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="session")
def serving():
    """`with serving(app) as base_url:` runs another app for one test."""
    return _serving


@pytest.fixture(scope="session")
def serve_limits() -> ServeLimits:
    """Small limits, so that the over-limit requests of the tests stay small too."""
    return ServeLimits(max_upload_bytes=2**20, max_pixels=4_000_000, thumb_size=64, thumb_cache=8)


@pytest.fixture(scope="session")
def app(gallery, serve_limits):
    return create_app(gallery.index_dir, device="cpu", limits=serve_limits)


@pytest.fixture(scope="session")
def base_url(app) -> Iterator[str]:
    with _serving(app) as url:
        yield url


@pytest.fixture(scope="session")
def serve_process():
    """`with serve_process("--index", DIR, ...) as server:` runs `retrieval serve` as a user does."""
    return _serve_process
