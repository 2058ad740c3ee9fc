"""The latency a learned re-ranker adds to one query, on the CPU with onnxruntime, at N = 10, 20 and 50 results.

What `index query --reranker` and `serve --reranker` pay on top of the plain search, per query:

- `query`: describing the query image (read, preprocess, `describe.onnx`);
- `results (cold)`: reading and describing its N results' images, which a first search of them pays
  (`IndexReranker` then keeps their descriptors);
- `head`: the N pairs through `head.onnx`;
- `added (warm)` = query + head: results described before; `added (cold)` = query + results + head.

Medians (and 90th percentiles) over `--queries` queries, in milliseconds. With `--reranker DIR --images DIR` it
times a trained re-ranker on your images; without, an untrained pair model of `--backbone` at `--image-size`
on random-noise images (the cost does not depend on the weights).

    python tools/bench_reranker.py                                   # resnet18 at 64 px, P = 256
    python tools/bench_reranker.py --reranker runs/glyphs/reranker --images data/glyphs/images --threads 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from retrieval.core.learned_rerank import PREPROCESS_FILE, read_reranker
from retrieval.core.preprocess import Preprocess
from retrieval.export.reranker_onnx import OnnxPairScorer

__all__ = ["main"]

DEPTHS = (10, 20, 50)
_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reranker", type=Path, help="a `retrieval reranker` directory (default: an untrained one)")
    parser.add_argument("--images", type=Path, help="a folder of images to query with and re-score (with --reranker)")
    parser.add_argument(
        "--backbone", default="resnet18", help="the untrained pair model's backbone (default: resnet18)"
    )
    parser.add_argument(
        "--image-size", type=int, default=64, help="the untrained pair model's input size (default: 64)"
    )
    parser.add_argument("--width", type=int, default=256, help="the untrained pair model's descriptor width P")
    parser.add_argument("--queries", type=int, default=30, help="queries timed at each N (default: 30)")
    parser.add_argument("--threads", type=int, help="onnxruntime intra-op threads (default: its own, every core)")
    args = parser.parse_args(argv)
    if (args.reranker is None) != (args.images is None):
        parser.error("--reranker and --images go together")
    with tempfile.TemporaryDirectory(prefix="bench-reranker-") as scratch:
        if args.reranker is None:
            directory = _untrained(args.backbone, args.image_size, args.width, Path(scratch))
            paths = _noise_images(Path(scratch) / "images", max(DEPTHS) + args.queries)
        else:
            directory = read_reranker(args.reranker).directory
            paths = sorted(path for path in args.images.rglob("*") if path.suffix.lower() in _SUFFIXES)
            if len(paths) < max(DEPTHS) + 1:
                parser.error(f"--images holds {len(paths)} images; the benchmark needs at least {max(DEPTHS) + 1}")
        scorer = OnnxPairScorer(directory, Preprocess.read(directory / PREPROCESS_FILE), "cpu", args.threads)
        print(f"re-ranker {args.reranker or f'untrained {args.backbone} at {args.image_size} px, P = {args.width}'}")
        print(f"onnxruntime threads: {args.threads or 'default'}; {args.queries} queries at each N; milliseconds")
        print(
            f"{'N':>3}  {'query':>14}  {'results (cold)':>14}  {'head':>14}  {'added (warm)':>14}  {'added (cold)':>14}"
        )
        for depth in DEPTHS:
            print(_row(scorer, paths, depth, args.queries))
    return 0


def _row(scorer: OnnxPairScorer, paths: list[Path], depth: int, queries: int) -> str:
    """One line of the table: each stage's median (90th percentile) over `queries` queries with `depth` results."""
    rng = np.random.default_rng(depth)
    times: dict[str, list[float]] = {"query": [], "results": [], "head": []}
    for _ in range(queries + 1):  # the first is a warm-up, left out
        chosen = rng.choice(len(paths), size=depth + 1, replace=False)
        query, results = paths[chosen[0]], [paths[i] for i in chosen[1:]]
        described, seconds = _timed(scorer.describe_images, [Image.open(query)])
        times["query"].append(seconds)
        candidates, seconds = _timed(scorer.describe_files, results)
        times["results"].append(seconds)
        cosines = rng.uniform(0.3, 1.0, depth).astype(np.float32)
        _, seconds = _timed(scorer.probabilities, np.repeat(described, depth, axis=0), candidates, cosines)
        times["head"].append(seconds)
    kept = {name: np.array(values[1:]) * 1000 for name, values in times.items()}
    warm, cold = kept["query"] + kept["head"], kept["query"] + kept["results"] + kept["head"]
    cells = [kept["query"], kept["results"], kept["head"], warm, cold]
    return f"{depth:>3}  " + "  ".join(f"{np.median(cell):>6.2f} ({np.percentile(cell, 90):>5.1f})" for cell in cells)


def _timed(work: Callable[..., np.ndarray], *args: Any) -> tuple[np.ndarray, float]:
    """`work(*args)` and the seconds it took."""
    start = time.perf_counter()
    result = work(*args)
    return result, time.perf_counter() - start


def _untrained(backbone: str, image_size: int, width: int, scratch: Path) -> Path:
    """A re-ranker directory's ONNX files and preprocessing for an untrained pair model (torch, once)."""
    import json

    from retrieval.config import load_config
    from retrieval.data.transforms import describe_eval_transform
    from retrieval.models import Embedder
    from retrieval.models.pair_model import PairModel
    from retrieval.reranker.onnx import export_pair_model

    embedder = Embedder(backbone, embedding_dim=128, pretrained=False)
    preprocess = describe_eval_transform(load_config().augment, image_size, embedder.data_config(), 3)
    directory = scratch / "reranker"
    directory.mkdir()
    (directory / PREPROCESS_FILE).write_text(json.dumps(preprocess.to_dict()))
    export_pair_model(PairModel(embedder, width, 2, 3, image_size), directory, preprocess)
    return directory


def _noise_images(folder: Path, count: int) -> list[Path]:
    """`count` random-noise PNG files of 96 x 96 pixels."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    paths = []
    for index in range(count):
        path = folder / f"{index}.png"
        Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    raise SystemExit(main())
