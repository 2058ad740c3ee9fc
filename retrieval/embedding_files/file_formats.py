"""Embeddings written for use elsewhere (`retrieval embed`): one file, its format chosen by its suffix.

Every format holds the same three things, row `i` of each describing image `i`:

- `embeddings`: `(N, D)` float32 unit vectors (cosine similarity = inner product);
- `ids`: `(N,)` the image paths (absolute);
- `labels`: `(N,)` class ids;

plus any other metadata column of the source (e.g. `split`, `is_query`, `is_gallery`). Labels and
extra columns keep the types the source was read with (`retrieval.core.column_types`: int64, float64
or string, decided over the whole source; plain string cells given here are typed by the same
rule). Parquet keeps nulls (empty cells); `.npz`/`.npy` arrays cannot, so there a null string is
`""` and a null number NaN (an int64 column with nulls is stored as float64), and
`retrieval index build --embeddings` reads both back as null.

| suffix | layout | read with |
|---|---|---|
| `.npz` | arrays `embeddings`, `ids`, `labels`, one per extra column | `np.load(path)["embeddings"]` |
| `.npy` | one structured array, fields `id`, `label`, extras, `embedding` (D,) | `np.load(path)["embedding"]` |
| `.parquet` | columns `id`, `label`, extras, `embedding` (fixed-size list of D float32) | `pq.read_table(path)` |

Each also records the sha256 of the checkpoint that made the embeddings, where the format has room for
it: parquet in its schema's key-value metadata (`retrieval.checkpoint_sha256`), `.npz` as the member
`_checkpoint_sha256`. A `.npy` file is one array with no room for it (numpy's header takes no other
keys): `retrieval index build --embeddings FILE.npy --checkpoint CKPT` names the model instead.

No format needs `allow_pickle`. Files are written with `retrieval.runtime.files.atomic_write`
(a temporary name beside the target, renamed into place), so a reader never sees a half-written file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from retrieval.errors import UserError
from retrieval.runtime.files import atomic_write

if TYPE_CHECKING:  # pyarrow loads when a file is read or written, so `embed --help` stays instant
    import pyarrow as pa

    Column: TypeAlias = Sequence[str] | pa.Array | pa.ChunkedArray

__all__ = [
    "EMBEDDING_SUFFIXES",
    "NPZ_CHECKPOINT_MEMBER",
    "read_checkpoint_sha256",
    "read_embeddings",
    "write_embeddings",
]

EMBEDDING_SUFFIXES = (".npz", ".npy", ".parquet")
_PARQUET_CHECKPOINT_KEY = b"retrieval.checkpoint_sha256"
NPZ_CHECKPOINT_MEMBER = "_checkpoint_sha256"  # a leading `_`: no metadata column of a source is called that


def write_embeddings(
    path: str | Path,
    embeddings: np.ndarray,
    ids: Column,
    labels: Column,
    extra: Mapping[str, Column] | None = None,
    checkpoint_sha256: str | None = None,
) -> None:
    """Write `(N, D)` embeddings with their ids, labels and extra columns to `path` (format by suffix).

    Typed Arrow columns are written with their types (files written in parts pass the whole
    source's, so every part has the same); text cells are typed by `retrieval.core.column_types`.
    `checkpoint_sha256` (the model that made them) is recorded where the format has room (not `.npy`),
    so that an index built from the file can embed query images with that checkpoint.

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
    columns = {"ids": _arrow(ids, "path"), "labels": _arrow(labels, "label")}
    columns.update({name: _arrow(values, name) for name, values in (extra or {}).items()})
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    if any(len(values) != len(embeddings) for values in columns.values()):
        raise ValueError(f"{len(embeddings)} embeddings but columns of {[len(v) for v in columns.values()]} rows")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as temporary:
            writer(temporary, embeddings, columns, checkpoint_sha256)
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
        return {name: loaded[name] for name in loaded.files if name != NPZ_CHECKPOINT_MEMBER}
    out = {"embeddings": loaded["embedding"]}
    out.update({_PLURAL.get(name, name): loaded[name] for name in loaded.dtype.names if name != "embedding"})
    return out


def read_checkpoint_sha256(path: str | Path) -> str | None:
    """The checkpoint sha256 a file `write_embeddings` wrote records (parquet, `.npz`), None when it has none.

    Reads the parquet footer or the one `.npz` member only, never the rows.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        recorded = (pq.read_schema(path).metadata or {}).get(_PARQUET_CHECKPOINT_KEY)
        return recorded.decode() if recorded else None
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as loaded:
            return str(loaded[NPZ_CHECKPOINT_MEMBER]) if NPZ_CHECKPOINT_MEMBER in loaded.files else None
    return None


_PLURAL = {"id": "ids", "label": "labels"}
_SINGULAR = {plural: singular for singular, plural in _PLURAL.items()}


def _arrow(values: Column, name: str) -> pa.Array:
    """A column as one Arrow array: typed arrays as they are, text cells typed by `retrieval.core.column_types`."""
    import pyarrow as pa

    from retrieval.core.column_types import typed_table

    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    return typed_table({name: [str(value) for value in values]})[name].combine_chunks()


def _numpy(values: pa.Array) -> np.ndarray:
    """An Arrow column as a numpy array without nulls: `""` for a null string, NaN for a null number."""
    import pyarrow as pa

    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return np.asarray(values.fill_null("").to_pylist(), dtype=str)
    if values.null_count and (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        return values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return values.to_numpy(zero_copy_only=False)


def _write_npz(path: Path, embeddings: np.ndarray, columns: dict[str, pa.Array], checkpoint: str | None) -> None:
    arrays = {name: _numpy(values) for name, values in columns.items()}
    if checkpoint:
        arrays[NPZ_CHECKPOINT_MEMBER] = np.asarray(checkpoint)
    with path.open("wb") as handle:  # a file object: np.savez would append .npz to a name
        np.savez(handle, allow_pickle=False, embeddings=embeddings, **arrays)


def _write_npy(path: Path, embeddings: np.ndarray, columns: dict[str, pa.Array], checkpoint: str | None) -> None:
    del checkpoint  # a .npy file has no room for it (see the module's docstring)
    arrays = {name: _numpy(values) for name, values in columns.items()}
    fields = [(_SINGULAR.get(name, name), values.dtype) for name, values in arrays.items()]
    table = np.empty(len(embeddings), dtype=[*fields, ("embedding", np.float32, (embeddings.shape[1],))])
    for (field, _), values in zip(fields, arrays.values(), strict=True):
        table[field] = values
    table["embedding"] = embeddings
    with path.open("wb") as handle:
        np.save(handle, table, allow_pickle=False)


def _write_parquet(path: Path, embeddings: np.ndarray, columns: dict[str, pa.Array], checkpoint: str | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {_SINGULAR.get(name, name): values for name, values in columns.items()}
    flat = pa.array(embeddings.reshape(-1), type=pa.float32())
    arrays["embedding"] = pa.FixedSizeListArray.from_arrays(flat, embeddings.shape[1])
    metadata = {_PARQUET_CHECKPOINT_KEY: checkpoint.encode()} if checkpoint else None
    pq.write_table(pa.table(arrays, metadata=metadata), path)


_WRITERS: dict[str, Callable[[Path, np.ndarray, dict[str, pa.Array], str | None], None]] = {
    ".npz": _write_npz,
    ".npy": _write_npy,
    ".parquet": _write_parquet,
}
