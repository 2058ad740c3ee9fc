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
from collections.abc import Mapping
from typing import Annotated, Any

import pyarrow as pa
from pydantic import BeforeValidator, ConfigDict, Field, JsonValue
from pydantic_core import PydanticCustomError

from retrieval.errors import UserError
from retrieval.index.manifest import IndexManifest
from retrieval.inference.interface import ModelInfo
from retrieval.validation import Record, ValidationError, user_error

__all__ = ["METADATA_KEY", "RECORD_VERSION", "CollectionRecord", "ExportedManifest", "export_record"]

METADATA_KEY = "retrieval"
RECORD_VERSION = 1
_PRIVATE_MANIFEST_KEYS = ("files", "removed_ids")  # file checksums of the index directory; tombstones can be long


def _with_dimension(manifest: Any) -> Any:
    """The raw manifest, if it is an object with a positive integer `dimension` (what every reader needs first)."""
    dimension = manifest.get("dimension") if isinstance(manifest, dict) else None
    if not (isinstance(dimension, int) and not isinstance(dimension, bool) and dimension >= 1):
        expected = "an index manifest with a positive integer dimension"
        raise PydanticCustomError("rule", expected, {"value": manifest})
    return manifest


class ExportedManifest(Record):
    """The index manifest as an export keeps it: without its file list and removed ids; the fields read here typed.

    The rest of the manifest's fields (kind, factory, measured, ...) are kept as they were written,
    for `serve --backend`'s `/info`; the index side checked them when it loaded the index.
    """

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    dimension: Annotated[int, Field(ge=1)]
    next_id: Annotated[int, Field(ge=0)]  # filters on `id` are bounded by it
    created: str | None = None  # the build's time: with the model, what a rebuild changes
    model: ModelInfo = Field(default_factory=ModelInfo)
    database_augmentation: str | None = None  # the dba spec of the exported vectors; None: plain


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

    manifest: Annotated[ExportedManifest, BeforeValidator(_with_dimension)]
    index_version: str
    schema_ipc: str = Field(validation_alias="schema", serialization_alias="schema")
    complete: bool
    version: int = RECORD_VERSION

    @classmethod
    def read(cls, metadata: Mapping[str, Any] | None) -> CollectionRecord | None:
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

    def to_metadata(self) -> dict[str, JsonValue]:
        """The collection metadata holding this record: Qdrant's free-form collection `metadata` object."""
        return {METADATA_KEY: self.model_dump(by_alias=True, exclude_unset=True)}  # the manifest as it was given

    def finished(self) -> CollectionRecord:
        """This record with the export marked complete."""
        return self.model_copy(update={"complete": True})

    @property
    def dimension(self) -> int:
        """Dimension D of the exported vectors."""
        return self.manifest.dimension

    @property
    def model(self) -> ModelInfo:
        """The model that embedded the vectors, as the index manifest records it (empty: raw embeddings)."""
        return self.manifest.model

    @property
    def lineage(self) -> tuple[str | None, str | None, int]:
        """What stays the same through `index add`/`remove` and changes on a rebuild: build time, model, dimension.

        Ids are never reused within one lineage and an item's vector and metadata never change, so
        an id already in the collection holds exactly what the index holds for it.
        """
        return (self.manifest.created, self.model.checkpoint_sha256, self.dimension)

    def metadata_schema(self) -> pa.Schema:
        """The exported metadata's Arrow schema (the `id` column included)."""
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema_ipc)))


def export_record(manifest: IndexManifest, index_version: str, schema: pa.Schema) -> CollectionRecord:
    """The record of an export of the index with this manifest and metadata schema, not yet complete."""
    kept = manifest.model_dump(by_alias=True, exclude_unset=True, exclude=set(_PRIVATE_MANIFEST_KEYS))
    encoded = base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")
    return CollectionRecord.model_validate(
        {
            "manifest": kept,
            "index_version": index_version,
            "schema": encoded,
            "complete": False,
            "version": RECORD_VERSION,
        }
    )
