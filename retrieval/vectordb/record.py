"""`CollectionRecord`: what `retrieval index export` writes into a collection's metadata, and `serve --backend` reads.

The record lives in the collection's own metadata (Qdrant's collection `metadata`, under the key
`retrieval`), not in a reserved point, so searches, counts and scrolls see the exported items only.
It holds the index manifest's facts (dimension, kind, build time, the model that embedded the
vectors: checkpoint sha256, config, transform), the sha256 of the exported `manifest.json` (the
index version: any `add`/`remove` changes it), the metadata's Arrow schema (filters are checked
against it exactly as the FAISS index checks them) and whether the export finished.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

import pyarrow as pa
from pydantic import ConfigDict, Field

from retrieval.errors import UserError
from retrieval.validation import Record, ValidationError, accepts, user_error

__all__ = ["METADATA_KEY", "RECORD_VERSION", "CollectionRecord"]

METADATA_KEY = "retrieval"
RECORD_VERSION = 1
_PRIVATE_MANIFEST_KEYS = ("files", "removed_ids")  # file checksums of the index directory; tombstones can be long


def _has_dimension(manifest: dict[str, Any]) -> bool:
    dimension = manifest.get("dimension")
    return isinstance(dimension, int) and not isinstance(dimension, bool) and dimension >= 1


class CollectionRecord(Record):
    """The exported index's identity and the export's state; JSON types, read strictly.

    Attributes:
        manifest: the index manifest without its file list and removed ids.
        index_version: sha256 of the exported index's `manifest.json`.
        schema: the metadata's Arrow schema, IPC-serialized and base64-encoded.
        complete: False from the first write of an export until its last.
        version: the record's format version.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    manifest: Annotated[dict[str, Any], accepts(_has_dimension, "an index manifest with a positive integer dimension")]
    index_version: str
    schema_ipc: str = Field(validation_alias="schema", serialization_alias="schema")
    complete: bool
    version: int = RECORD_VERSION

    @classmethod
    def of_index(cls, manifest: dict[str, Any], index_version: str, schema: pa.Schema) -> CollectionRecord:
        """The record of an export of the index with this manifest and metadata schema, not yet complete."""
        shown = {key: value for key, value in manifest.items() if key not in _PRIVATE_MANIFEST_KEYS}
        encoded = base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")
        return cls.model_validate(
            {"manifest": shown, "index_version": index_version, "schema": encoded, "complete": False}
        )

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any] | None) -> CollectionRecord | None:
        """The record in a collection's metadata; None when `index export` did not write the collection.

        Raises:
            UserError: a record written by a newer version of this toolkit, or a damaged one.
        """
        stored = (metadata or {}).get(METADATA_KEY)
        if stored is None:
            return None
        if not isinstance(stored, dict) or not isinstance(stored.get("version"), int):
            raise UserError(f"the collection's {METADATA_KEY!r} metadata is damaged; export the index again")
        if stored["version"] > RECORD_VERSION:
            raise UserError(
                f"the collection was exported by a newer retrieval (record version {stored['version']}); upgrade"
            )
        try:
            return cls.model_validate(stored)
        except ValidationError as exc:
            raise user_error(
                cls, exc, f"the collection's {METADATA_KEY!r} metadata", "export the index again"
            ) from None

    def to_metadata(self) -> dict[str, Any]:
        """The collection metadata holding this record."""
        return {METADATA_KEY: self.model_dump(by_alias=True)}

    def finished(self) -> CollectionRecord:
        """This record with the export marked complete."""
        return self.model_copy(update={"complete": True})

    @property
    def dimension(self) -> int:
        """Dimension D of the exported vectors."""
        return int(self.manifest["dimension"])  # checked on reading

    @property
    def model(self) -> dict[str, Any]:
        """The model that embedded the vectors, as the index manifest records it (empty: raw embeddings)."""
        return dict(self.manifest.get("model") or {})

    @property
    def lineage(self) -> tuple[Any, ...]:
        """What stays the same through `index add`/`remove` and changes on a rebuild: build time, model, dimension.

        Ids are never reused within one lineage and an item's vector and metadata never change, so
        an id already in the collection holds exactly what the index holds for it.
        """
        return (self.manifest.get("created"), self.model.get("checkpoint_sha256"), self.dimension)

    def metadata_schema(self) -> pa.Schema:
        """The exported metadata's Arrow schema (the `id` column included)."""
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_ipc)))
