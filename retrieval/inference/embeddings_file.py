"""Embeddings written for use elsewhere (`retrieval embed`): one file, its format chosen by its suffix.

Every format holds the same three things, row `i` of each describing image `i`:

- `embeddings`: `(N, D)` float32 unit vectors (cosine similarity = inner product);
- `ids`: `(N,)` the image paths (absolute);
- `labels`: `(N,)` class ids: int64 when every label is an integer, else strings (`""` when unknown);

plus any other metadata column of the source (e.g. `split`, `is_query`, `is_gallery`) as strings.

| suffix | layout | read with |
|---|---|---|
| `.npz` | arrays `embeddings`, `ids`, `labels`, one per extra column | `np.load(path)["embeddings"]` |
| `.npy` | one structured array, fields `id`, `label`, extras, `embedding` (D,) | `np.load(path)["embedding"]` |
| `.parquet` | columns `id`, `label`, extras, `embedding` (fixed-size list of D float32) | `pq.read_table(path)` |

No format needs `allow_pickle`. Files are written with `retrieval.runtime.files.atomic_write`
(a temporary name beside the target, renamed into place), so a reader never sees a half-written file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from retrieval.errors import UserError
from retrieval.runtime.files import atomic_write

__all__ = ["EMBEDDING_SUFFIXES", "labels_are_integers", "read_embeddings", "write_embeddings"]

EMBEDDING_SUFFIXES = (".npz", ".npy", ".parquet")


def write_embeddings(
    path: str | Path,
    embeddings: np.ndarray,
    ids: Sequence[str],
    labels: Sequence[str],
    extra: Mapping[str, Sequence[str]] | None = None,
    integer_labels: bool | None = None,
) -> None:
    """Write `(N, D)` embeddings with their ids, labels and extra string columns to `path` (format by suffix).

    `integer_labels` stores labels as int64 (True) or strings (False); None decides from `labels`
    (int64 when every label is an integer). Files written in parts pass the whole source's choice,
    so every part has the same label type.

    Raises:
        UserError: the suffix is not one of `EMBEDDING_SUFFIXES`, or the parent folder cannot be written.
        ValueError: the columns do not all have N rows.
    """
    path = Path(path)
    writer = _WRITERS.get(path.suffix.lower())
    if writer is None:
        raise UserError(
            f"--out {path}: unknown format {path.suffix!r}; end the name with {', '.join(EMBEDDING_SUFFIXES)}"
        )
    columns = {"ids": np.asarray(ids, dtype=str), "labels": _labels_array(labels, integer_labels)}
    columns.update({name: np.asarray(values, dtype=str) for name, values in (extra or {}).items()})
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    if any(len(values) != len(embeddings) for values in columns.values()):
        raise ValueError(f"{len(embeddings)} embeddings but columns of {[len(v) for v in columns.values()]} rows")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as temporary:
            writer(temporary, embeddings, columns)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}; choose another --out") from exc


def read_embeddings(path: str | Path) -> dict[str, np.ndarray]:
    """`{"embeddings": (N, D), "ids": (N,), "labels": (N,), extras...}` from a file `write_embeddings` wrote."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        vectors = table.column("embedding")
        flat = vectors.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        out = {"embeddings": flat.astype(np.float32, copy=False).reshape(-1, vectors.type.list_size)}
        out.update({_PLURAL.get(name, name): table.column(name).to_numpy() for name in table.column_names[:-1]})
        return out
    loaded = np.load(path, allow_pickle=False)
    if path.suffix == ".npz":
        return {name: loaded[name] for name in loaded.files}
    out = {"embeddings": loaded["embedding"]}
    out.update({_PLURAL.get(name, name): loaded[name] for name in loaded.dtype.names if name != "embedding"})
    return out


_PLURAL = {"id": "ids", "label": "labels"}
_SINGULAR = {plural: singular for singular, plural in _PLURAL.items()}


def labels_are_integers(labels: Sequence[str]) -> bool:
    """Whether labels are stored as int64: there is at least one and every one is an integer."""
    text = [str(label) for label in labels]
    return bool(text) and all(label.lstrip("-").isdigit() for label in text)


def _labels_array(labels: Sequence[str], integer_labels: bool | None) -> np.ndarray:
    text = [str(label) for label in labels]
    as_integers = labels_are_integers(text) if integer_labels is None else integer_labels
    if as_integers:
        return np.asarray([int(label) for label in text], dtype=np.int64)
    return np.asarray(text, dtype=str)


def _write_npz(path: Path, embeddings: np.ndarray, columns: dict[str, np.ndarray]) -> None:
    with path.open("wb") as handle:  # a file object: np.savez would append .npz to a name
        np.savez(handle, allow_pickle=False, embeddings=embeddings, **columns)


def _write_npy(path: Path, embeddings: np.ndarray, columns: dict[str, np.ndarray]) -> None:
    fields = [(_SINGULAR.get(name, name), values.dtype) for name, values in columns.items()]
    table = np.empty(len(embeddings), dtype=[*fields, ("embedding", np.float32, (embeddings.shape[1],))])
    for (field, _), values in zip(fields, columns.values(), strict=True):
        table[field] = values
    table["embedding"] = embeddings
    with path.open("wb") as handle:
        np.save(handle, table, allow_pickle=False)


def _write_parquet(path: Path, embeddings: np.ndarray, columns: dict[str, np.ndarray]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # From the numpy arrays: an empty column keeps its type (int64 or string), not pyarrow's null.
    arrays = {_SINGULAR.get(name, name): pa.array(values) for name, values in columns.items()}
    flat = pa.array(embeddings.reshape(-1), type=pa.float32())
    arrays["embedding"] = pa.FixedSizeListArray.from_arrays(flat, embeddings.shape[1])
    pq.write_table(pa.table(arrays), path)


_WRITERS: dict[str, Callable[[Path, np.ndarray, dict[str, np.ndarray]], None]] = {
    ".npz": _write_npz,
    ".npy": _write_npy,
    ".parquet": _write_parquet,
}
