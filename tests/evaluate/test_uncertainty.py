"""The per-query file behind `retrieval compare` and the sweep's intervals."""

from __future__ import annotations

import numpy as np

from retrieval.evaluate.uncertainty import PER_QUERY_FILE, QueryValues, load_query_values, save_query_values


def test_per_query_values_round_trip_through_one_npz_file(tmp_path) -> None:
    """`save_query_values` writes exactly the named file (no `.npz` appended, no temporary left)."""
    rng = np.random.default_rng(0)
    classes = np.repeat([f"c{i}" for i in range(23)], rng.integers(1, 10, 23))
    values = rng.uniform(0, 1, len(classes))
    saved = QueryValues(np.arange(len(values)), classes, {"recall@1": values, "map@r": values / 2})
    save_query_values(tmp_path / PER_QUERY_FILE, saved)
    assert [path.name for path in tmp_path.iterdir()] == [PER_QUERY_FILE]
    loaded = load_query_values(tmp_path)
    np.testing.assert_array_equal(loaded.rows, saved.rows)
    np.testing.assert_array_equal(loaded.labels, saved.labels)
    for key in ("recall@1", "map@r"):
        np.testing.assert_array_equal(loaded.values[key], saved.values[key])
