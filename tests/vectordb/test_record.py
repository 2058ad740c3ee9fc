"""`CollectionRecord`: the record an export writes into a collection's metadata, read back and checked."""

from __future__ import annotations

import pyarrow as pa
import pytest

from retrieval.errors import UserError
from retrieval.vectordb.record import METADATA_KEY, CollectionRecord

_SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string())])


def _record() -> CollectionRecord:
    manifest = {"dimension": 8, "kind": "flat", "created": "2026-12-02T10:00:00", "files": {}, "removed_ids": [3]}
    return CollectionRecord.of_index(manifest, "ab" * 32, _SCHEMA)


def test_a_record_reads_back_as_written_without_the_private_keys() -> None:
    record = _record().finished()
    stored = record.to_metadata()
    assert set(stored[METADATA_KEY]) == {"manifest", "index_version", "schema", "complete", "version"}
    assert "files" not in stored[METADATA_KEY]["manifest"] and "removed_ids" not in stored[METADATA_KEY]["manifest"]
    again = CollectionRecord.from_metadata(stored)
    assert again == record and again is not None and again.complete
    assert again.dimension == 8 and again.metadata_schema().equals(_SCHEMA)
    assert CollectionRecord.from_metadata({}) is None and CollectionRecord.from_metadata(None) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"complete": "yes"}, "metadata.complete must be bool, got 'yes'"),
        (
            {"manifest": {"kind": "flat"}},
            "metadata.manifest must be an index manifest with a positive integer",
        ),
        ({"index_version": None}, "metadata.index_version must be str, got None"),
        ({"surprise": 1}, "unknown key"),
        ({"version": 99}, "exported by a newer retrieval (record version 99); upgrade"),
        ({"version": "1"}, "metadata is damaged"),
    ],
)
def test_a_damaged_record_is_one_line_naming_the_field(change, message) -> None:
    stored = _record().to_metadata()[METADATA_KEY] | change
    with pytest.raises(UserError) as caught:
        CollectionRecord.from_metadata({METADATA_KEY: stored})
    assert message in str(caught.value) and "\n" not in str(caught.value)
