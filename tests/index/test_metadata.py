"""Arrow metadata keyed by id: lookups against a dict oracle, appends, removals, memory-mapped reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from retrieval.errors import UserError
from retrieval.index.metadata import Metadata


def test_lookups_by_id_match_a_dict_oracle(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ids = np.sort(rng.choice(10**9, size=5000, replace=False)).astype(np.int64)
    table = Metadata.from_rows(ids, {"path": [f"p{i}" for i in ids], "label": (ids % 13).tolist()})
    table.write(tmp_path / "m.arrow")
    read = Metadata.read(tmp_path / "m.arrow")
    oracle = {int(i): {"id": int(i), "path": f"p{i}", "label": int(i % 13)} for i in ids}
    wanted = rng.choice(ids, size=300)
    assert read.rows_for(wanted) == [oracle[int(i)] for i in wanted]
    with pytest.raises(UserError, match=r"unknown id\(s\): 7"):
        read.rows_of([ids[0], 7])


def test_reading_maps_the_file_instead_of_copying_it(tmp_path: Path) -> None:
    Metadata.from_rows(np.arange(100_000), {"label": np.arange(100_000)}).write(tmp_path / "m.arrow")
    before = pa.total_allocated_bytes()
    read = Metadata.read(tmp_path / "m.arrow")
    assert pa.total_allocated_bytes() - before < 100_000  # 1.6 MB of columns, none of it allocated
    assert read.ids[-1] == 99_999 and not read.ids.flags.writeable


def test_append_and_remove_keep_ids_sorted_and_unique() -> None:
    table = Metadata.from_rows(np.arange(5), {"path": list("abcde")})
    grown = table.appended(Metadata.from_rows(np.arange(10, 12), {"path": ["x", "y"], "width": [3, 4]}))
    assert grown.rows_for([11, 2]) == [{"id": 11, "path": "y", "width": 4}, {"id": 2, "path": "c", "width": None}]
    shrunk = grown.without(np.array([0, 10]))
    np.testing.assert_array_equal(shrunk.ids, [1, 2, 3, 4, 11])
    with pytest.raises(ValueError, match="larger"):
        shrunk.appended(Metadata.from_rows(np.array([4]), None))
