"""`CollectionRecord`: the record an export writes into a collection's metadata, read back and checked."""

from __future__ import annotations

import pyarrow as pa
import pytest

from retrieval.errors import UserError
from retrieval.index.manifest import IndexManifest
from retrieval.vectordb.record import METADATA_KEY, CollectionRecord, export_record

_SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string())])


def _record() -> CollectionRecord:
    manifest = {
        **{"format": "retrieval-index", "version": 1, "metric": "inner_product", "normalized": True, "factory": "Flat"},
        **{"dimension": 8, "kind": "flat", "count": 3, "next_id": 4, "created": "2026-12-02T10:00:00"},
        **{"files": {}, "removed_ids": [3]},
    }
    return export_record(IndexManifest.model_validate(manifest), "ab" * 32, _SCHEMA)


def test_a_record_reads_back_as_written_without_the_private_keys() -> None:
    record = _record().finished()
    stored = record.to_metadata()
    assert set(stored[METADATA_KEY]) == {"manifest", "index_version", "schema", "complete", "version"}
    assert "files" not in stored[METADATA_KEY]["manifest"] and "removed_ids" not in stored[METADATA_KEY]["manifest"]
    again = CollectionRecord.read(stored)
    assert again == record and again is not None and again.complete
    assert again.dimension == 8 and again.metadata_schema().equals(_SCHEMA)
    assert CollectionRecord.read({}) is None and CollectionRecord.read(None) is None


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
        CollectionRecord.read({METADATA_KEY: stored})
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_record_of_the_untyped_layout_reads_with_its_model_typed() -> None:
    """A collection exported before the manifest was typed: its `manifest` is the index manifest's JSON as it was."""
    stored = _record().to_metadata()[METADATA_KEY]
    stored["manifest"] |= {"model": {"checkpoint_sha256": "cd" * 32, "model_config": {"backbone": "resnet10t"}}}
    record = CollectionRecord.read({METADATA_KEY: stored})
    assert record is not None and record.model.identity == "cd" * 32 and record.manifest.next_id == 4
    assert record.to_metadata()[METADATA_KEY] == stored  # written back key for key


def test_a_manifest_field_an_export_reads_is_named_when_damaged() -> None:
    stored = _record().to_metadata()[METADATA_KEY]
    stored["manifest"] |= {"next_id": "4"}
    with pytest.raises(UserError, match=r"metadata\.manifest must be .*; export the index again$"):
        CollectionRecord.read({METADATA_KEY: stored})
