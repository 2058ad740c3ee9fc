"""Per-vector metadata (path, label, extra columns) in an Arrow IPC file keyed by id.

The table is written uncompressed in the Arrow IPC file format, so `pa.memory_map` opens it
without reading or copying the columns: opening does not grow with the row count
(docs/benchmarks.md, "Search index"). Rows are kept sorted by their int64 `id` column (ids only
grow), so id -> row is a vectorized binary search, never a row position that could drift from the index.

Every value must be one JSON can write, since search results and the vector database carry the rows
as JSON: a float column holding NaN or infinity is refused when rows are given (use null for a
missing value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval.core.column_types import ARROW_TYPES, ColumnType, kept_type_fix, typed_cells
from retrieval.errors import UserError
from retrieval.index.metadata_types import check_metadata

__all__ = ["ID_COLUMN", "RESERVED_COLUMNS", "Metadata", "MetadataInput"]

ID_COLUMN = "id"
# Names a search result gives its own fields beside the row's columns (`index query --json`), so a column of that
# name would be silently replaced in every result.
RESERVED_COLUMNS = {
    ID_COLUMN: "the index assigns ids",
    "rank": "index query reports each result's rank under that name",
    "score": "search results report their score under that name",
}
# Rows given for new vectors: an Arrow table, a dict of columns, or None for ids only.
MetadataInput: TypeAlias = "pa.Table | Mapping[str, Sequence[Any]] | None"


class Metadata:
    """An Arrow table of rows keyed by a sorted, unique int64 `id` column."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self._ids = _ids_of(table)

    @classmethod
    def from_rows(cls, ids: np.ndarray, rows: MetadataInput) -> Metadata:
        """Metadata for new vectors: `rows` (N rows, any columns but `id`) keyed by `ids` (N,).

        Raises:
            UserError: `rows` has an `id`, `rank` or `score` column, a number of rows other than `len(ids)`, a
                column of a type an index does not store (`retrieval.index.metadata_types`), or a float column
                holding NaN or infinity.
        """
        ids = np.asarray(ids, dtype=np.int64)
        table = pa.table({}) if rows is None else rows if isinstance(rows, pa.Table) else pa.table(dict(rows))
        for name, why in RESERVED_COLUMNS.items():
            if name in table.column_names:
                raise UserError(
                    f"metadata must not have a column named {name!r}: {why}; rename it (e.g. to item_{name})"
                )
        check_metadata(table, "the metadata")
        _check_finite(table)
        if rows is not None and table.num_rows != len(ids):
            raise UserError(f"metadata has {table.num_rows} rows for {len(ids)} vectors; give one row per vector")
        columns = {ID_COLUMN: pa.array(ids, pa.int64()), **{name: table[name] for name in table.column_names}}
        return cls(pa.table(columns))

    @classmethod
    def read(cls, path: Path) -> Metadata:
        """Open `path` memory-mapped (zero copy); `UserError` if it is not an Arrow IPC file with ids."""
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise UserError(f"cannot read index metadata {path}: {exc}") from exc
        if ID_COLUMN not in table.column_names:
            raise UserError(f"index metadata {path} has no {ID_COLUMN!r} column; rebuild the index")
        return cls(table)

    def write(self, path: Path) -> None:
        """Write the table as an uncompressed Arrow IPC file (memory-mappable)."""
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, self.table.schema) as writer:
            writer.write_table(self.table)

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def ids(self) -> np.ndarray:
        """`(N,)` int64 ids in ascending order (read-only view of the column)."""
        return self._ids

    def rows_of(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Row positions of `ids`, vectorized; `UserError` naming the ids that are not stored."""
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        rows = np.searchsorted(self._ids, wanted)
        found = rows < len(self._ids)
        found[found] = self._ids[rows[found]] == wanted[found]
        if not found.all():
            missing = wanted[~found]
            shown = ", ".join(str(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise UserError(f"unknown id(s): {shown}; ids come from search results or `add`")
        return rows

    def rows_for(self, ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The rows of `ids` as dicts (`id` first), in the order given.

        Dicts, not a record: the columns are the user's own (any names, the types their files gave them).
        """
        return self.table.take(pa.array(self.rows_of(ids))).to_pylist()

    def appended(self, other: Metadata) -> Metadata:
        """This table followed by `other` (whose ids must all be larger); columns missing on one side are null.

        A column of `other` typed otherwise than the same column here is cast to this table's type
        (the index's types stay: an index whose labels are strings gets `"3"` for an added 3).

        Raises:
            UserError: a value of `other` that this table's column type cannot hold (2.5 in an int column).
        """
        if len(other) and len(self) and other.ids[0] <= self._ids[-1]:
            raise ValueError("appended ids must be larger than every stored id")
        table = pa.concat_tables([self.table, _conformed(other.table, self.table.schema)], promote_options="permissive")
        return Metadata(table)

    def without(self, ids: np.ndarray) -> Metadata:
        """This table without the rows of `ids` (which must be stored)."""
        keep = np.ones(len(self), dtype=bool)
        keep[self.rows_of(ids)] = False
        return Metadata(self.table.filter(pa.array(keep)))


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with each column that `schema` also has in `schema`'s type (other columns as they are).

    Text becomes an int64 or float64 column by `typed_cells`, the reading `index build` gave the
    index's own cells, so a cell the build would have kept as text (`nan`, `1e309`) is refused, not stored.
    """
    for position, name in enumerate(table.column_names):
        if name not in schema.names or table.schema.field(name).type == schema.field(name).type:
            continue
        source, target = table.schema.field(name).type, schema.field(name).type
        fix = kept_type_fix(name)
        kind: ColumnType | None = "int" if target == ARROW_TYPES["int"] else None
        kind = "float" if target == ARROW_TYPES["float"] else kind
        if kind is not None and (pa.types.is_string(source) or pa.types.is_large_string(source)):
            what = f"new metadata column {name!r} goes into the index's {kind} column"
            column: pa.Array | pa.ChunkedArray = typed_cells(name, table[name].to_pylist(), kind, what, fix)
        else:
            try:
                column = table[name].cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise UserError(
                    f"new metadata column {name!r} holds {source} values the index stores as {target} "
                    f"({str(exc).splitlines()[0]}); {fix}"
                ) from exc
        table = table.set_column(position, name, column)
    return table


def _check_finite(table: pa.Table) -> None:
    """`UserError` naming the first float column holding NaN or infinity, which JSON cannot write."""
    for name in table.column_names:
        column = table[name]
        if not pa.types.is_floating(column.type):
            continue
        finite = np.asarray(pc.fill_null(pc.is_finite(column), True).to_numpy(zero_copy_only=False), dtype=bool)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            raise UserError(
                f"metadata column {name!r} holds {column[row].as_py()} (row {row + 1}): JSON and the vector "
                "database cannot store NaN or infinity; use null (an empty cell) for a missing value"
            )


def _ids_of(table: pa.Table) -> np.ndarray:
    column = table[ID_COLUMN]
    if column.null_count:
        raise UserError("index metadata has rows without an id; rebuild the index")
    ids = column.to_numpy() if column.num_chunks != 1 else column.chunk(0).to_numpy(zero_copy_only=True)
    ids = ids.astype(np.int64, copy=False)
    if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
        raise UserError("index metadata ids are not unique and ascending; rebuild the index")
    return ids
