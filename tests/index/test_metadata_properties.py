"""Properties of metadata from CSV text to what a search returns, and of `index add` against a rebuild.

- Round trip: CSV text -> the CSV reader and type inference (`read_source`) -> a saved and reloaded index ->
  a search -> the JSON of `index query --json` (`QueryMatch`) and of `serve` (`SearchResult`) gives every
  cell back as the same text, or as a number whose text is exactly that cell; an empty cell as null.
- `index add` equals a rebuild: adding rows to an index gives the metadata that building from the union gives
  when the union is declared with the index's column types (`--column-types`), and refuses exactly the
  rows such a build refuses.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval.core.column_types import column_types_of, typed_table
from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.metadata import Metadata
from retrieval.index.min_score import QueryMatch
from retrieval.inference.sources import read_source
from retrieval.serve.responses import SearchResult
from tests.properties import examples

pytestmark = pytest.mark.property

# Texts that look like numbers and are not their number's text, type bounds and float edge values.
_TRICKY = [
    "1.10", "1e3", "+5", "007", "1.0", "-0", "-0.0", "0.0", ".5", "5.", "1e-400", "1e400", "9007199254740993.0",
    "9007199254740993", "9007199254740992", "0.1000000000000000000001", "nan", "NaN", "inf", "-inf", "1_000",
    "١٢", " 1", "1 ", "0x10", "1e+16", "5e-324", "2.2250738585072014e-308", "9223372036854775807",
    "-9223372036854775808", "9223372036854775808", "18446744073709551615", "true", "null", "None", "Ａ", "é", "é",
]  # fmt: skip
_NAMES = ["price", "label", "ver", "class", "and", "in", "not", "null", "a b", "a.b", "a`b", "ünï", "x-y", "score_"]


def _cells() -> st.SearchStrategy[str]:
    text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00\r"), max_size=12)
    return st.one_of(
        st.just(""),
        st.integers(-(2**63), 2**63 - 1).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.sampled_from(_TRICKY),
        text,
    )


@st.composite
def csv_tables(draw: st.DrawFn, min_rows: int = 1) -> dict[str, list[str]]:
    """Columns of text cells: each column draws its cells mostly from one kind, so numeric columns occur."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=4, unique=True))
    rows = draw(st.integers(min_rows, 8))
    table = {}
    for name in names:
        kind = draw(st.sampled_from(["int", "float", "any"]))
        one = {
            "int": st.integers(-(2**63), 2**63 - 1).map(str),
            "float": st.floats(allow_nan=False, allow_infinity=False).map(repr),
            "any": _cells(),
        }[kind]
        table[name] = draw(st.lists(st.one_of(one, one, _cells()), min_size=rows, max_size=rows))
    return table


def _write_csv(path: Path, columns: dict[str, list[str]]) -> Path:
    rows = len(next(iter(columns.values())))
    (path.parent / "i.png").touch()
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", *columns])
        writer.writerows(["i.png", *(cells[row] for cells in columns.values())] for row in range(rows))
    return path


def _same(value: object, cell: str) -> bool:
    """Whether a JSON value is the cell: the same text, or a number whose text is exactly the cell."""
    if cell == "":
        return value is None
    if isinstance(value, str):
        return value == cell
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return str(value) == cell
    if isinstance(value, float):
        return repr(value) == cell or (cell.lstrip("-").isdigit() and float(int(cell)) == value)
    return False


@examples(0.5)
@given(columns=csv_tables())
def test_every_cell_comes_back_from_a_search_as_written(columns, tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("roundtrip")
    csv_path = _write_csv(folder / "a.csv", columns)
    if any("|" in cell and not all(part.strip() for part in cell.split("|")) for cell in columns.get("label", [])):
        with pytest.raises(UserError, match="empty label in"):  # the format's rule for multi-label rows
            read_source(csv_path, None)
        return
    source = read_source(csv_path, None)
    n = len(source.paths)
    vectors = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)
    SearchIndex.build(vectors, source.rows(np.arange(n)), kind="flat", progress=False).save(folder / "index")
    index = SearchIndex.load(folder / "index")
    _, ids = index.search(vectors[:1], k=n)
    for item_id, row in zip(ids[0], index.metadata_for(ids[0]), strict=True):
        query_json = json.loads(json.dumps(QueryMatch.model_validate({**row, "rank": 1, "score": 0.5}).model_dump()))
        public = {"id": int(item_id), "label": row.get("label"), "path": None, "metadata": row, "thumb": "/t"}
        serve_json = json.loads(SearchResult.model_validate({**public, "score": 0.5}).model_dump_json())
        for name, cells in columns.items():
            cell = cells[int(item_id)].strip() if name == "label" else cells[int(item_id)]  # the format's column
            assert _same(query_json[name], cell), (name, cell, query_json[name])
            assert _same(serve_json["metadata"][name], cell), (name, cell, serve_json["metadata"][name])


@examples(0.5)
@given(first=csv_tables(), more=st.data())
def test_index_add_equals_a_rebuild_with_the_index_types(first, more) -> None:
    rest = {name: more.draw(st.lists(_cells(), min_size=1, max_size=5)) for name in first}
    added_rows = len(next(iter(rest.values())))
    rest = {name: cells[:added_rows] + [""] * (added_rows - len(cells)) for name, cells in rest.items()}
    index = SearchIndex.build(
        np.eye(len(next(iter(first.values()))) + 1, 4, dtype=np.float32)[1:] + 0.1,
        typed_table(first),
        kind="flat",
        progress=False,
    )
    stored = {name: kind for name, kind in column_types_of(index.metadata_schema).items() if name in first}
    union = {name: first[name] + rest[name] for name in first}
    try:
        rebuilt = typed_table(union, stored)
    except UserError:
        with pytest.raises(UserError):
            typed_table(rest, None, "the new rows", stored)
        return
    added = typed_table(rest, None, "the new rows", stored)
    index.add(np.full((added_rows, 4), 0.5, dtype=np.float32), added)
    merged = index.metadata_for(index.ids)
    assert [{name: row[name] for name in first} for row in merged] == rebuilt.to_pylist()
    assert Metadata.from_rows(np.arange(len(merged)), rebuilt).table.schema.remove(0) == index.metadata_schema.remove(0)
