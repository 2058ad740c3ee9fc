"""Embeddings that `retrieval embed` wrote, opened for an index build that streams them: no model, bounded memory.

Accepted paths, in any mix, read in the order given:

- `.parquet` (columns `id`, `label`, extras, `embedding`): streamed by row batches
  (`pyarrow.parquet.ParquetFile.iter_batches`);
- `.npy`: memory-mapped; either `embed`'s structured array (fields `id`, `label`, extras,
  `embedding`) or a plain `(N, D)` float array (ids only, no metadata);
- `.npz` (`embed`'s arrays): read whole, one file at a time (a zip member cannot be mapped);
- a directory of parts (`retrieval embed --out DIR/`): read part by part with
  `retrieval.embedding_files.parts_layout.iter_embedding_parts`, which refuses a directory without
  `_SUCCESS` (an unfinished embed job) and a part whose sha256 does not match its `.json`.

Rows are numbered 0..N-1 across all files in that order: these numbers become the index ids.
The files' `id` (the image path) becomes the metadata column `path`, `label` stays `label`, and
extra columns keep their names (in `.npz`/`.npy` files, whose arrays have no nulls, an empty
string or a NaN is read back as null). The manifest records each file (name, rows, size) and, when the
files say so (parts directories, and the `.parquet` and `.npz` files `embed` writes), the checkpoint
sha256 that made them; querying or adding images later needs that model (`--checkpoint`).
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from retrieval.embedding_files.file_formats import EMBEDDING_SUFFIXES, NPZ_CHECKPOINT_MEMBER, read_checkpoint_sha256
from retrieval.embedding_files.parts_layout import iter_embedding_parts, read_part_record, read_success
from retrieval.errors import UserError
from retrieval.index.manifest import ShardInput, SourceRecord
from retrieval.index.metadata_types import check_metadata, check_metadata_schema
from retrieval.index.streaming import VectorStream
from retrieval.runtime.files import file_sha256, sampled_sha256

__all__ = ["EmbeddingFiles", "check_column_types", "open_embedding_files"]

_VECTOR_COLUMN = "embedding"
_RENAMED = {"id": "path", "ids": "path", "labels": "label"}  # file column -> index metadata column
_NOT_METADATA = ("embeddings", NPZ_CHECKPOINT_MEMBER)  # the `.npz` members that are not columns


@dataclass(frozen=True)
class _File:
    """One file of rows, or a directory of parts read as one: its path, row count and dimension.

    `sha256`: what a part's `.json` records, checked before its rows are read (a part read on its own).
    """

    path: Path
    rows: int
    dim: int
    sha256: str | None = None

    def chunks(self, chunk_rows: int) -> Iterator[np.ndarray]:
        """The file's `(n, D)` vectors, at most `chunk_rows` rows at a time."""
        suffix = self.path.suffix
        if self.path.is_dir():
            for part in iter_embedding_parts(self.path):  # each part whole (embed's --part-rows), its sha256 checked
                yield from _slices(part["embeddings"], chunk_rows)
            return
        self._check_sha256()
        if suffix == ".parquet":
            batches = pq.ParquetFile(self.path).iter_batches(batch_size=chunk_rows, columns=[_VECTOR_COLUMN])
            for batch in batches:
                yield _vectors_of(batch.column(0), self.dim)
            return
        if suffix == ".npy":
            yield from _npy_chunks(self.path, chunk_rows)
            return
        with np.load(self.path) as loaded:
            yield from _slices(loaded["embeddings"], chunk_rows)

    def _check_sha256(self) -> None:
        """`UserError` if this is a part whose bytes are not the ones its `.json` records."""
        if self.sha256 is not None and (not self.path.is_file() or file_sha256(self.path) != self.sha256):
            raise UserError(
                f"embedding part {self.path} is missing or does not match its .json (sha256); rerun embed to rewrite it"
            )

    def units(self) -> list[_File]:
        """What a shard takes whole: the file itself, or each part of a parts directory (as a parquet file)."""
        if not self.path.is_dir():
            return [self]
        parts = []
        for name in read_success(self.path).parts:
            record = read_part_record(self.path / name)
            parts.append(_File(self.path / name, record.rows, self.dim, record.sha256))
        return parts

    def fingerprint(self) -> str:
        """What tells this input's content apart on any machine, without reading it whole.

        A parts directory: the sha256 of its parts' sha256s (each part's `.json`, already written by
        embed). A file: `sampled_sha256` (size and 16 blocks), as a full sha256 would make every
        machine of a sharded build read every input, where it reads only its own. Not the path
        (storage is mounted at other places on other machines) nor the mtime (a copy changes it).
        """
        if not self.path.is_dir():
            return sampled_sha256(self.path)
        return hashlib.sha256("".join(str(unit.sha256) for unit in self.units()).encode()).hexdigest()

    def schema(self) -> pa.Schema:
        """The types of `metadata()`'s columns, from headers only: a parquet footer (a parts directory's first
        part: embed types every part as the whole source), a `.npy` header, the `.npz` members' headers."""
        if self.path.is_dir():
            fields = list(pq.read_schema(self.path / read_success(self.path).parts[0]))
        elif self.path.suffix == ".parquet":
            fields = list(pq.read_schema(self.path))
        else:
            if self.path.suffix == ".npy":
                dtype = np.load(self.path, mmap_mode="r").dtype
                dtypes = {name: dtype[name] for name in dtype.names or ()}
            else:
                dtypes = _npz_dtypes(self.path)
            fields = [
                pa.field(name, pa.from_numpy_dtype(dtype))
                for name, dtype in dtypes.items()
                if name not in (_VECTOR_COLUMN, *_NOT_METADATA)
            ]
        kept = [field for field in fields if field.name not in (_VECTOR_COLUMN, *_NOT_METADATA)]
        return pa.schema([field.with_name(_RENAMED.get(field.name, field.name)) for field in kept])

    def metadata(self) -> pa.Table:
        """The file's rows without their vectors, columns renamed for the index (`id` -> `path`).

        A parts directory's parts are read as the parquet files they are (each checked against its
        `.json`), never through numpy, which would turn an int64 column holding a null into float64 NaN.
        """
        if self.path.is_dir():
            return pa.concat_tables([part.metadata() for part in self.units()])
        if self.path.suffix == ".parquet":
            self._check_sha256()
            names = [name for name in pq.ParquetFile(self.path).schema_arrow.names if name != _VECTOR_COLUMN]
            table = pq.read_table(self.path, columns=names)
        elif self.path.suffix == ".npy":
            array = np.load(self.path, mmap_mode="r")
            names = [name for name in (array.dtype.names or ()) if name != _VECTOR_COLUMN]
            table = _with_nulls(pa.table({name: np.asarray(array[name]) for name in names}))
        else:
            with np.load(self.path) as loaded:
                table = _with_nulls(
                    pa.table({name: loaded[name] for name in loaded.files if name not in _NOT_METADATA})
                )
        if not table.column_names:
            return pa.table({"row": pa.nulls(self.rows, pa.int64())}).drop_columns(["row"])
        return table.rename_columns([_RENAMED.get(name, name) for name in table.column_names])


def _with_nulls(table: pa.Table) -> pa.Table:
    """A numpy file's columns with their nulls back: `embed` writes a null as `""` (strings) or NaN (numbers)."""
    for position, name in enumerate(table.column_names):
        column = table[name]
        if pa.types.is_floating(column.type):
            column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = pc.if_else(pc.equal(column, ""), pa.scalar(None, column.type), column)
        table = table.set_column(position, name, column)
    return table


@dataclass(frozen=True)
class EmbeddingFiles:
    """Embedding files opened for streaming: N rows of dimension D, in the order the paths were given.

    Attributes:
        files: every file or parts directory read, in order.
        rows: N.
        dim: D.
        checkpoint_sha256: the checkpoint that made the embeddings, when the files record it (parts directories,
            `embed`'s `.parquet` and `.npz` files).
    """

    files: tuple[_File, ...]
    rows: int
    dim: int
    checkpoint_sha256: str | None

    @property
    def stream(self) -> VectorStream:
        """The rows as a `VectorStream` for `SearchIndex.build_streamed`."""

        def read(chunk_rows: int) -> Iterator[np.ndarray]:
            for file in self.files:
                yield from file.chunks(chunk_rows)

        return VectorStream(count=self.rows, dim=self.dim, read=read)

    def shard(self, number: int, count: int) -> tuple[EmbeddingFiles, int]:
        """Shard `number` (0-based) of `count`: a contiguous run of whole inputs, and the row number of its first row.

        Inputs are files, and a parts directory's parts each (their sha256 checked as they are read), so that
        `count` machines share one embed job's parts. An input starting at row r goes to shard
        floor(r · count / N): runs of about N / count rows, in order, each row in exactly one shard.

        Raises:
            UserError: this shard gets no input (more shards than inputs).
        """
        units = [unit for file in self.files for unit in file.units()]
        starts = np.cumsum([0] + [unit.rows for unit in units])[:-1]
        owners = np.minimum(starts * count // self.rows, count - 1)
        mine = tuple(unit for unit, owner in zip(units, owners, strict=True) if owner == number)
        if not mine:
            raise UserError(
                f"shard {number}/{count} gets none of the {len(units)} embedding files or parts; use fewer shards"
            )
        first_row = int(starts[owners == number][0])
        return EmbeddingFiles(mine, sum(unit.rows for unit in mine), self.dim, self.checkpoint_sha256), first_row

    def identity(self) -> list[ShardInput]:
        """The ordered inputs as a shard records them: each one's path (as given, for messages), rows and fingerprint.

        Shards of one split were built from equal lists (`merge_shards` compares rows and fingerprints).
        """
        return [ShardInput(path=str(file.path), rows=file.rows, fingerprint=file.fingerprint()) for file in self.files]

    def metadata(self) -> pa.Table | None:
        """The N rows' metadata (`path`, `label`, extras); a column one file lacks is null in its rows.

        None when no file has any (plain `.npy` arrays): the index then stores ids only.

        Raises:
            UserError: a value an index does not store (a uint64 past 2**63 - 1), naming its file and row.
        """
        tables = [file.metadata() for file in self.files]
        for file, table in zip(self.files, tables, strict=True):
            check_metadata(table, str(file.path))  # the values, naming the file (the headers were checked on opening)
        table = pa.concat_tables(tables, promote_options="permissive")
        return table if table.column_names else None

    def sources(self) -> list[SourceRecord]:
        """What the manifest records about the inputs: path and rows of each file or parts directory; a file's size."""
        return [
            SourceRecord.model_validate(
                {
                    "path": str(file.path),
                    "rows": file.rows,
                    **({} if file.path.is_dir() else {"bytes": file.path.stat().st_size}),
                }
            )
            for file in self.files
        ]


def open_embedding_files(paths: Sequence[str | Path]) -> EmbeddingFiles:
    """Open embedding files and parts directories for streaming, checking that they agree on the dimension.

    Only headers are read here (parquet footers, `.npy` headers, `_SUCCESS`); `.npz` files are
    loaded once to count their rows.

    Raises:
        UserError: a path is missing, of an unknown format, without embeddings, an unfinished parts
            directory, of another dimension than the first, made by another checkpoint than another path,
            or holding a metadata column of a type an index does not store (`retrieval.index.metadata_types`).
    """
    if not paths:
        raise UserError("--embeddings needs at least one file or directory")
    files: list[_File] = []
    checkpoints: set[str] = set()
    for path in map(Path, paths):
        if path.is_dir():
            record = read_success(path)
            files.append(_File(path, record.rows, record.dim))
            recorded = record.checkpoint_sha256
        else:
            files.append(_open_file(path))
            recorded = read_checkpoint_sha256(path)
        checkpoints |= {recorded} if recorded else set()
    dims = {file.dim for file in files}
    if len(dims) > 1:
        shown = ", ".join(f"{file.path} ({file.dim}-d)" for file in files[:4])
        raise UserError(f"the embedding files have different dimensions: {shown}; index files of one model only")
    rows = sum(file.rows for file in files)
    if rows == 0:
        raise UserError(f"the embedding files hold no rows: {', '.join(map(str, paths))}")
    if len(checkpoints) > 1:
        raise UserError("the embedding files were made by different checkpoints; index one model's only")
    schemas = [(str(file.path), file.schema()) for file in files]
    for source, schema in schemas:
        check_metadata_schema(schema, source)
    check_column_types(
        schemas,
        "embed every file with the same --column-types, or index them apart",
    )
    return EmbeddingFiles(tuple(files), rows, dims.pop(), checkpoints.pop() if checkpoints else None)


def check_column_types(schemas: Sequence[tuple[str, pa.Schema]], fix: str) -> pa.Schema:
    """The one metadata schema of several sources' tables, as `pa.concat_tables(promote_options="permissive")`
    unifies them (int64 with float64 is float64; a column one source lacks is null in its rows).

    Called before any row is read, so that a shard build refuses its inputs at once, not the merge at the end.

    Args:
        schemas: each source's name (for the message) and its columns' types.
        fix: how to fix a conflict, appended after "; ".

    Raises:
        UserError: a column has types no promotion joins (int64 in one file, string in another), naming it,
            the two types and their sources.
    """
    try:
        return pa.unify_schemas([schema for _, schema in schemas], promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    seen: dict[str, tuple[str, pa.DataType]] = {}
    for name, schema in schemas:
        for field in schema:
            first = seen.setdefault(field.name, (name, field.type))
            try:
                pa.unify_schemas(
                    [pa.schema([(field.name, first[1])]), pa.schema([field])], promote_options="permissive"
                )
            except (pa.ArrowTypeError, pa.ArrowInvalid):
                raise UserError(
                    f"column {field.name!r} is {first[1]} in {first[0]} but {field.type} in {name}; {fix}"
                ) from None
    raise UserError(f"the column types of {', '.join(name for name, _ in schemas)} cannot be joined; {fix}")


def _open_file(path: Path) -> _File:
    """A `_File` for `path`, its rows and dimension read from the header."""
    if not path.is_file():
        raise UserError(f"embedding file not found: {path}; pass files or DIR/ that `retrieval embed --out` wrote")
    if path.suffix not in EMBEDDING_SUFFIXES:
        raise UserError(f"{path}: unknown embedding format {path.suffix!r}; use {', '.join(EMBEDDING_SUFFIXES)}")
    try:
        if path.suffix == ".parquet":
            parquet = pq.ParquetFile(path)
            vector_type = parquet.schema_arrow.field(_VECTOR_COLUMN).type
            return _File(path, parquet.metadata.num_rows, _list_size(vector_type, path))
        if path.suffix == ".npy":
            array = _npy_vectors(path)
            return _File(path, int(array.shape[0]), int(array.shape[1]))
        with np.load(path) as loaded:
            shape = loaded["embeddings"].shape
        return _File(path, int(shape[0]), int(shape[1]))
    except (KeyError, ValueError, OSError, pa.ArrowException) as exc:
        raise UserError(f"{path} is not an embeddings file `retrieval embed` writes ({exc})") from exc


def _npy_vectors(path: Path) -> np.ndarray:
    """The `(N, D)` vectors of a `.npy`, memory-mapped: `embed`'s `embedding` field or a plain float array."""
    array = np.load(path, mmap_mode="r")
    if array.dtype.names is not None:
        array = array[_VECTOR_COLUMN]
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.floating):
        raise ValueError(f"expected (N, D) float vectors, got {array.dtype} of shape {array.shape}")
    return array


def _npz_dtypes(path: Path) -> dict[str, np.dtype]:
    """Each `.npz` member's dtype, from its `.npy` header alone (`np.load` of a member reads it whole)."""
    dtypes = {}
    with zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            with archive.open(member) as handle:
                dtypes[member.removesuffix(".npy")] = _npy_header(handle)[2]
    return dtypes


def _npy_header(handle: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """`(shape, fortran_order, dtype)` of the `.npy` data at `handle`'s position, which moves past the header."""
    version = np.lib.format.read_magic(handle)
    read_header = np.lib.format.read_array_header_2_0 if version >= (2, 0) else np.lib.format.read_array_header_1_0
    return read_header(handle)


def _slices(array: np.ndarray, chunk_rows: int) -> Iterator[np.ndarray]:
    for start in range(0, len(array), chunk_rows):
        yield array[start : start + chunk_rows]


def _npy_chunks(path: Path, chunk_rows: int) -> Iterator[np.ndarray]:
    """The vectors of a `.npy`, `chunk_rows` rows at a time, read with plain file reads.

    Not through a memory map: the pages of a mapped file read end to end count as the process's
    resident memory, and a 5 GB file would look like a 5 GB process.
    """
    with open(path, "rb") as handle:
        shape, fortran_order, dtype = _npy_header(handle)
        if fortran_order:
            raise UserError(f"{path} is stored in Fortran order; save it with np.save of a C-ordered array")
        row = dtype if dtype.names is not None else np.dtype((dtype, shape[1:]))  # a plain array's row: D floats
        for start in range(0, shape[0], chunk_rows):
            rows = np.fromfile(handle, dtype=row, count=min(chunk_rows, shape[0] - start))
            yield rows[_VECTOR_COLUMN] if dtype.names is not None else rows


def _list_size(vector_type: pa.DataType, path: Path) -> int:
    if not pa.types.is_fixed_size_list(vector_type):
        raise UserError(f"{path}: column {_VECTOR_COLUMN!r} is {vector_type}, not a fixed-size list of floats")
    return int(vector_type.list_size)


def _vectors_of(column: pa.Array, dim: int) -> np.ndarray:
    """`(n, D)` float32 rows of a fixed-size-list column (no copy for float32 without nulls)."""
    return column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, dim)
