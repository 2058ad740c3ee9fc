"""One set of embedding inputs split into three shards of one trained index and merged, for the shard tests."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index.from_embeddings import open_embedding_files
from retrieval.index.shards import merge_into, train_index
from retrieval.runtime.files import file_sha256

PART_ROWS = 700
NLIST = 16


def write_parts(directory: Path, vectors: np.ndarray) -> Path:
    """The layout `retrieval embed --out DIR/` writes: parquet parts, a `.json` each, `_SUCCESS` last."""
    directory.mkdir()
    names = []
    for part, start in enumerate(range(0, len(vectors), PART_ROWS)):
        stop = min(start + PART_ROWS, len(vectors))
        path = directory / f"part-{part:05d}.parquet"
        write_embeddings(
            path, vectors[start:stop], [f"/img/{i}.png" for i in range(start, stop)], [str(start)] * (stop - start)
        )
        record = {"part": part, "first_row": start, "rows": stop - start, "sha256": file_sha256(path), "dim": 32}
        path.with_suffix(".json").write_text(json.dumps(record))
        names.append(path.name)
    success = {"rows": len(vectors), "dim": 32, "parts": names, "checkpoint_sha256": "ab" * 32}
    (directory / "_SUCCESS").write_text(json.dumps(success))
    return directory


def make_split(vectors: np.ndarray, root: Path) -> dict[str, Path]:
    """A parts directory and a plain .npy of the rows after it, a trained index, three shards and their merge.

    What `index train`, `index build --trained --shard K/3` (shard 1 with `--on-disk`) and `index merge`
    run; the keys: `root`, `trained`, `shard0`..`shard2` (the merge is `root/merged`).
    """
    np.save(root / "tail.npy", vectors[3000:])
    inputs = (write_parts(root / "parts", vectors[:3000]), root / "tail.npy")
    train_index(open_embedding_files(list(inputs)), root / "trained", nlist=NLIST, progress=False)
    for k in range(3):
        shard = IndexBuildRequest(root / f"shard{k}", embeddings=inputs, trained=root / "trained", shard=(k, 3))
        build_index(dataclasses.replace(shard, on_disk=k == 1))
    merge_into([root / f"shard{k}" for k in (2, 0, 1)], root / "merged")
    return {"root": root, "trained": root / "trained", **{f"shard{k}": root / f"shard{k}" for k in range(3)}}
