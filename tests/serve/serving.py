"""The tiny served gallery and `retrieval serve` run as a process, shared by `tests/serve` and the command's tests in
`tests/cli`."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.inference.image_encoder import ImageEncoder


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


def make_gallery(root: Path, checkpoint: Path, csv_dataset_factory: Callable[..., Path]) -> Gallery:
    """A flat index of 3 + 3 classes of 4 images under `root`, built as `index build --checkpoint CKPT --csv CSV
    --type flat` builds it, with the images' embeddings made apart from the index."""
    csv_path = csv_dataset_factory(root / "data", train_classes=3, test_classes=3, per_class=4)
    index_dir = root / "index"
    build_index(IndexBuildRequest(index_dir, EncoderChoice(checkpoint=checkpoint), csv=csv_path, kind="flat"))
    index = SearchIndex.load(index_dir)
    ids = index.ids
    paths = [Path(row["path"]) for row in index.metadata_for(ids)]
    embeddings = ImageEncoder.from_checkpoint(checkpoint, device="cpu").embed_files(paths, progress=False)
    return Gallery(index_dir, checkpoint, paths, ids, embeddings.embeddings)


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
def serve_process(*args: str) -> Iterator[ServeProcess]:
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
