"""Check that `pip install "retrieval[serve]"` serves an ONNX export: no torch there, searches answered.

Run with the full environment (it exports a model, which needs torch) and point it at a second one
that has only the `serve` extra:

    python -m venv .venv-serve && .venv-serve/bin/pip install ".[serve]"
    python tools/check_serve_without_torch.py --serve-venv .venv-serve

It checks that `import torch` fails in the serve environment, writes an untrained resnet10t checkpoint
(16-d, 32 px), exports it to ONNX and builds a small flat index of coloured images with this
environment, then starts the serve environment's `retrieval serve --index ... --model ...` on a free
loopback port and sends `POST /search` with an image and with a vector. `.ci/run` runs it after pytest.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["main"]

_STARTUP_S = 120  # the serve environment imports the web stack, onnxruntime and FAISS on a possibly busy CPU
_DIM = 16


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve-venv", type=Path, required=True, help="a venv with only retrieval[serve] installed")
    args = parser.parse_args(argv)
    venv = args.serve_venv
    started = time.perf_counter()
    torch_import = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True, text=True)
    if torch_import.returncode == 0:
        raise SystemExit(f"{venv} has torch: it is not a serve-only environment")
    print(f"{venv}: import torch fails ({torch_import.stderr.strip().splitlines()[-1]})")
    with tempfile.TemporaryDirectory(prefix="serve-without-torch-") as scratch:
        folder = Path(scratch)
        bundle, index_dir, images = _export_and_index(folder)
        command = [str(venv / "bin" / "retrieval"), "serve", "--index", str(index_dir), "--model", str(bundle)]
        with _serving([*command, "--device", "cpu", "--port", "0"]) as url:
            _search(url, images[0])
    print(f"serve without torch: ok in {time.perf_counter() - started:.0f} s")
    return 0


def _export_and_index(folder: Path) -> tuple[Path, Path, list[Path]]:
    """A tiny checkpoint's ONNX export and a flat index of 12 images built with it: `(bundle, index, images)`."""
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.cli.main import main as retrieval
    from retrieval.config import Config, ModelConfig, config_to_dict
    from retrieval.models import Embedder

    torch.manual_seed(0)
    model_config = ModelConfig(backbone="resnet10t", embedding_dim=_DIM, pretrained=False)
    config = Config(model=model_config)
    config.data.image_size = 32
    model = Embedder(**model_config.model_dump())
    checkpoint = Checkpoint(model.state_dict(), model_config, config_to_dict(config), num_classes=0)
    checkpoint.save(folder / "best.pt")
    rng = np.random.default_rng(0)
    images = []
    for i in range(12):
        pixels = np.clip(rng.integers(0, 256, size=3) + rng.normal(0, 20, size=(40, 40, 3)), 0, 255)
        images.append(folder / "images" / f"{i:02d}.png")
        images[-1].parent.mkdir(exist_ok=True)
        Image.fromarray(pixels.astype(np.uint8)).save(images[-1])
    bundle, index_dir = folder / "onnx", folder / "index"
    for command in (
        ["export", "--checkpoint", str(folder / "best.pt"), "--format", "onnx", "--out", str(bundle)],
        ["index", "build", "--model", str(bundle), "--images", str(folder / "images"), "--out", str(index_dir)],
    ):
        if retrieval([*command, *(["--type", "flat", "--num-workers", "0"] if "index" in command else [])]) != 0:
            raise SystemExit(f"retrieval {' '.join(command[:2])} failed")
    return bundle, index_dir, images


@contextmanager
def _serving(command: list[str]) -> Iterator[str]:
    """Run `retrieval serve ... --port 0`; yield its URL once uvicorn says where it listens, stop it after."""
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    try:
        lines: list[str] = []
        deadline = time.monotonic() + _STARTUP_S
        while time.monotonic() < deadline:
            line = server.stderr.readline()
            if not line and server.poll() is not None:
                raise SystemExit(f"retrieval serve exited with {server.returncode}:\n{''.join(lines[-10:])}")
            lines.append(line)
            if found := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line):
                threading.Thread(target=server.stderr.read, daemon=True).start()  # a full pipe would block it
                yield found[1]
                return
        raise SystemExit(f"retrieval serve did not start in {_STARTUP_S} s:\n{''.join(lines[-10:])}")
    finally:
        server.terminate()
        server.wait(30)


def _search(url: str, image: Path) -> None:
    """`POST /search` with an image (it must find itself first) and with a vector (k results)."""
    import httpx

    with image.open("rb") as handle:
        by_image = httpx.post(f"{url}/search", files={"image": (image.name, handle, "image/png")}, timeout=60)
    by_image.raise_for_status()
    first = by_image.json()["results"][0]
    if not (first["path"] or "").endswith(image.name) or abs(first["score"] - 1) > 1e-4:
        raise SystemExit(f"the image search did not find the image itself first: {first}")
    by_vector = httpx.post(f"{url}/search", json={"vector": [1.0] + [0.0] * (_DIM - 1), "k": 3}, timeout=60)
    by_vector.raise_for_status()
    if len(by_vector.json()["results"]) != 3:
        raise SystemExit(f"the vector search did not answer 3 results: {by_vector.json()}")
    print(f"POST /search: image -> id {first['id']} (score {first['score']:.4f}), vector -> 3 results")


if __name__ == "__main__":
    sys.exit(main())
