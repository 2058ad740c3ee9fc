"""`IndexManifest`: the typed fields of an index's `manifest.json`, checked before anything reads them.

`manifest.json` is a text file people open and edit; a field of the wrong type (a string where
a count belongs, a list where the file table belongs) must be refused naming the field, not
surface later as a `KeyError` or `TypeError` deep in loading or searching. Each nested entry is a
record of its own (`FileEntry`, `Measured`, `SourceRecord`, `ShardRecord`, `MergedShard`, the
model's `ModelInfo`, the `MatchThreshold`), read strictly and worded by `retrieval.validation`.
Fields and keys these models do not name are kept as they are (a later toolkit's additions); an
absent optional field is not checked, a present one is (null only where the field allows it), and
`as_dict` gives back exactly the fields that were there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, JsonValue, field_validator

from retrieval.core.match_threshold import MatchThreshold
from retrieval.index.choice import KINDS
from retrieval.inference.interface import ModelInfo
from retrieval.validation import Record, ValidationError, Worded, registered, user_error

__all__ = [
    "MIN_QUERIES",
    "FileEntry",
    "IndexManifest",
    "Measured",
    "MergedShard",
    "Sha256",
    "ShardInput",
    "ShardRecord",
    "SourceRecord",
    "well_measured",
]

# Fewer queries than this measure recall too coarsely for its 4 decimals, and time a batch too small
# for its queries/s to be more than the cost of one call: such figures are not printed.
MIN_QUERIES = 100

_Count = Annotated[int, Field(ge=0)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # a file digest as the manifests record it
_KEPT = ConfigDict(strict=True, extra="allow")  # JSON types exactly; a later toolkit's keys kept


class FileEntry(Record):
    """The size and sha256 of one file of the index directory."""

    model_config = _KEPT

    size: _Count
    sha256: Sha256


class Measured(Record):
    """How an index measured (`SearchIndex.evaluate`, and a build's on held-out queries): the manifest's `measured`.

    Every field is optional: an index that was not measured (a shard, a build with too few vectors)
    records `{}`. Recall is k-recall@k against exact search; latency is one query on one thread.
    """

    model_config = _KEPT

    recall_at_k: float | None = None  # None: nothing to measure (one vector, leave-one-out)
    k: int | None = None
    neighbors: int | None = None  # exact neighbours a query has (k unless the index holds fewer)
    queries: int | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    batch_qps: float | None = None
    batch_threads: int | None = None
    resident_bytes_per_vector: float | None = None
    disk_bytes_per_vector: float | None = None
    queries_from: str | None = None  # held-out build vectors or given tuning queries
    reference: str | None = None  # what recall is measured against
    ntotal: int | None = None  # `index eval`: the vectors searched, and the kind
    kind: str | None = None

    def as_dict(self) -> dict[str, JsonValue]:
        """JSON-ready, with exactly the keys it was made from (as `manifest.json` and `index eval --json` show it)."""
        return self.model_dump(exclude_unset=True)


def well_measured(measured: Measured) -> bool:
    """Whether a measurement counted enough queries (`MIN_QUERIES`) for its recall and speed to be printed."""
    return (measured.queries or 0) >= MIN_QUERIES


class SourceRecord(Record):
    """One input an index was built from: its path, rows and (a file's) size in bytes."""

    model_config = _KEPT

    path: str
    rows: _Count
    bytes: _Count | None = None  # a file's; a parts directory has none


class ShardInput(Record):
    """One input of a shard's split, as every shard of it records it: path (for messages), rows, fingerprint."""

    model_config = _KEPT

    path: str
    rows: _Count
    fingerprint: str


class ShardRecord(Record):
    """A shard's `shard`: shard `number` of `count`, and the full ordered list of inputs split between them."""

    model_config = _KEPT

    number: _Count
    count: Annotated[int, Field(ge=1)]
    inputs: list[ShardInput]


class MergedShard(Record):
    """One shard a merged index was merged from (`merged_from`): its path, first id and count."""

    model_config = _KEPT

    path: str
    first_id: _Count
    count: _Count


class IndexManifest(Record):
    """The checked fields of an index manifest; `read` turns the first bad one into a one-line `UserError`.

    Each `Worded` text is what the error says the field must be.
    """

    model_config = _KEPT

    format: str
    version: int
    dimension: Annotated[int, Field(gt=0), Worded("a positive integer")]
    metric: str
    normalized: Annotated[bool, Worded("true or false")]
    factory: str
    kind: Annotated[str, registered(KINDS)]  # what a built index records: a name of KINDS, never auto
    count: Annotated[_Count, Worded("a non-negative integer")]
    stored: Annotated[_Count | None, Worded("a non-negative integer")] = None
    next_id: Annotated[_Count, Worded("a non-negative integer")]
    removed_ids: Annotated[list[_Count], Worded("a list of non-negative integers")] = []
    search_parameters: Annotated[dict[str, int], Worded("an object of integer settings")] = {}
    target_recall: Annotated[Annotated[float, Field(gt=0, le=1)] | None, Worded("null or a recall in (0, 1]")] = None
    target_recall_source: Annotated[Literal["given", "default"] | None, Worded('null, "given" or "default"')] = None
    parameters: Annotated[dict[str, int], Worded("an object of integer sizes (nlist, hnsw_m, ...)")] = {}
    measured: Annotated[Measured, Worded("an object of measurements (recall_at_k, p50_ms, ...)")] = Field(
        default_factory=Measured
    )
    model: Annotated[ModelInfo, Worded("an object describing the model (checkpoint_sha256, ...)")] = Field(
        default_factory=ModelInfo
    )
    database_augmentation: Annotated[str | None, Worded("null or a dba spec string")] = None
    match_threshold: Annotated[MatchThreshold | None, Worded('null or an object with a numeric "score"')] = None
    files: Annotated[
        dict[str, FileEntry], Worded('an object of {"size": bytes, "sha256": 64 hex digits} by file name')
    ] = {}
    # What the build recorded about itself and its inputs; read for display and by `index merge`.
    toolkit_version: Annotated[str | None, Worded("a version string")] = None
    faiss_version: Annotated[str | None, Worded("a version string")] = None
    created: Annotated[str | None, Worded("an ISO 8601 time")] = None
    requested_kind: str | None = None
    max_memory: Annotated[int | None, Worded("null or a number of bytes")] = None
    inputs_were_normalized: Annotated[bool | None, Worded("true or false")] = None
    first_id: Annotated[_Count | None, Worded("a non-negative integer")] = None
    sources: Annotated[list[SourceRecord] | None, Worded('a list of {"path", "rows"} objects')] = None
    trained: Annotated[str | None, Worded("the trained index's sha256")] = None
    shard: Annotated[ShardRecord | None, Worded('an object of {"number", "count", "inputs"}')] = None
    merged_from: Annotated[list[MergedShard] | None, Worded('a list of {"path", "first_id", "count"} objects')] = None

    @field_validator("stored", "removed_ids", "search_parameters", "parameters", "measured", "model", mode="before")
    @classmethod
    def _present_means_set(cls, value: Any) -> Any:
        """Optional, but not nullable: a null in the file is as wrong as a value of another type."""
        if value is None:
            raise ValueError("null")
        return value

    @classmethod
    def read(cls, manifest: Mapping[str, Any], path: Path) -> IndexManifest:
        """The typed manifest of `manifest`, the JSON read from `path`.

        Raises:
            UserError: naming the first field whose value has the wrong type, and what it must be.
        """
        try:
            return cls.model_validate(dict(manifest))
        except ValidationError as exc:
            raise user_error(cls, exc, str(path), "fix it or rebuild the index") from None

    @property
    def stored_count(self) -> int:
        """Vectors in the FAISS index: `stored`, or `count` for manifests written before removals were hidden."""
        return self.count if self.stored is None else self.stored

    def as_dict(self) -> dict[str, JsonValue]:
        """The manifest as JSON-ready data, with exactly the fields it was made from (the model's keys by alias)."""
        return self.model_dump(by_alias=True, exclude_unset=True)
