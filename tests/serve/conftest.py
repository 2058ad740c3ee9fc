"""A tiny index of a tiny checkpoint, served by a real uvicorn server on an ephemeral loopback port."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import uvicorn

from retrieval.cli.main import main
from retrieval.index import SearchIndex
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.serve import ServeLimits, create_app


@dataclass
class Gallery:
    index_dir: Path
    checkpoint: Path
    paths: list[Path]  # indexed images, in id order
    ids: np.ndarray  # (N,) their ids
    embeddings: np.ndarray  # (N, D) embedded independently of the index, for brute-force references

    def exact(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Brute-force inner-product top-k: (scores, ids)."""
        similarities = self.embeddings @ query
        order = np.argsort(-similarities, kind="stable")[:k]
        return similarities[order], self.ids[order]


@pytest.fixture(scope="session")
def gallery(tmp_path_factory, tiny_checkpoint, csv_dataset_factory) -> Gallery:
    root = tmp_path_factory.mktemp("gallery")
    csv_path = csv_dataset_factory(root / "data", train_classes=3, test_classes=3, per_class=4)
    index_dir = root / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(index_dir)]
    assert main([*args, "--type", "flat", "--num-workers", "0"]) == 0
    index = SearchIndex.load(index_dir)
    ids = index.ids
    paths = [Path(row["path"]) for row in index.metadata_for(ids)]
    embeddings = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu").embed_files(paths, progress=False)
    return Gallery(index_dir, tiny_checkpoint, paths, ids, embeddings.embeddings)


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


@dataclass
class ServeProcess:
    url: str
    process: subprocess.Popen

    def peak_rss_bytes(self) -> int:
        """The server process's peak resident memory so far (`VmHWM` in /proc: no psutil needed)."""
        return _proc_status_bytes(self.process.pid, "VmHWM")


def _proc_status_bytes(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


@contextmanager
def _serve_process(*args: str) -> Iterator[ServeProcess]:
    """`retrieval serve ARGS --port 0` in its own process; yields its URL once uvicorn says it is listening."""
    command = [sys.executable, "-m", "retrieval.cli.main", "serve", *args, "--port", "0"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        port, lines = None, []
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = server.stderr.readline()
            lines.append(line)
            assert line or server.poll() is None, f"server exited: {''.join(lines[-5:])}"
            match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            port = int(match.group(1)) if match else None
        assert port is not None, "server did not start in 120 s"
        threading.Thread(target=server.stderr.read, daemon=True).start()  # keep draining: a full pipe blocks it
        yield ServeProcess(f"http://127.0.0.1:{port}", server)
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="session")
def serve_process():
    """`with serve_process("--index", DIR, ...) as server:` runs `retrieval serve` as a user does."""
    return _serve_process
