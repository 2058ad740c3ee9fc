"""`IndexManifest`: the typed fields of an index's `manifest.json`, checked before anything reads them.

`manifest.json` is a text file people open and edit; a field of the wrong type (a string where
a count belongs, a list where the file table belongs) must be refused naming the field, not
surface later as a `KeyError` or `TypeError` deep in loading or searching. Fields this model does
not name are kept as they are; an absent optional field is not checked, a present one is (null
only where the field allows it), and `as_dict` gives back exactly the fields that were there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError, short_repr
from retrieval.index.choice import KINDS

__all__ = ["FileEntry", "IndexManifest", "Sha256"]

_Count = Annotated[int, Field(ge=0)]
_BUILT_KINDS = tuple(kind.value for kind in KINDS)  # what a built index records (never `auto`)
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # a file digest as the manifests record it


class FileEntry(BaseModel):
    """The size and sha256 of one file of the index directory."""

    model_config = ConfigDict(strict=True, extra="allow")

    size: _Count
    sha256: Sha256


class IndexManifest(BaseModel):
    """The checked fields of an index manifest; `check` turns the first bad one into a one-line `UserError`.

    Each field's description is what the error says it must be.
    """

    model_config = ConfigDict(strict=True, extra="allow")

    format: str = Field(description="a string")
    version: int = Field(description="an integer")
    dimension: int = Field(gt=0, description="a positive integer")
    metric: str = Field(description="a string")
    normalized: bool = Field(description="true or false")
    factory: str = Field(description="a string")
    kind: Annotated[str, AfterValidator(_built_kind)] = Field(description=f"one of {', '.join(_BUILT_KINDS)}")
    count: _Count = Field(description="a non-negative integer")
    stored: _Count | None = Field(None, description="a non-negative integer")
    next_id: _Count = Field(description="a non-negative integer")
    removed_ids: list[_Count] = Field([], description="a list of non-negative integers")
    search_parameters: dict[str, int] = Field({}, description="an object of integer settings")
    target_recall: Annotated[float, Field(gt=0, le=1)] | None = Field(None, description="null or a recall in (0, 1]")
    target_recall_source: Literal["given", "default"] | None = Field(None, description='null, "given" or "default"')
    parameters: dict[str, Any] = Field({}, description="an object")
    measured: dict[str, Any] = Field({}, description="an object")
    model: dict[str, Any] = Field({}, description="an object")
    database_augmentation: str | None = Field(None, description="null or a dba spec string")
    match_threshold: MatchThreshold | None = Field(None, description='null or an object with a numeric "score"')
    files: dict[str, FileEntry] = Field(
        {}, description='an object of {"size": bytes, "sha256": 64 hex digits} by file name'
    )
    # What the build recorded about itself and its inputs; read for display and by `index merge`.
    toolkit_version: str | None = Field(None, description="a version string")
    faiss_version: str | None = Field(None, description="a version string")
    created: str | None = Field(None, description="an ISO 8601 time")
    requested_kind: str | None = Field(None, description="a string")
    max_memory: int | None = Field(None, description="null or a number of bytes")
    inputs_were_normalized: bool | None = Field(None, description="true or false")
    first_id: _Count | None = Field(None, description="a non-negative integer")
    sources: list[dict[str, Any]] | None = Field(None, description="a list of objects")
    trained: str | None = Field(None, description="the trained index's sha256")
    shard: dict[str, Any] | None = Field(None, description="an object")
    merged_from: list[dict[str, Any]] | None = Field(None, description="a list of objects")

    @field_validator("stored", "removed_ids", "search_parameters", "parameters", "measured", "model", mode="before")
    @classmethod
    def _present_means_set(cls, value: Any) -> Any:
        """Optional, but not nullable: a null in the file is as wrong as a value of another type."""
        if value is None:
            raise ValueError("null")
        return value

    @classmethod
    def check(cls, manifest: Mapping[str, Any], path: Path) -> IndexManifest:
        """The typed manifest of `manifest` (read from `path`).

        Raises:
            UserError: naming the first field whose value has the wrong type, and what it must be.
        """
        try:
            return cls.model_validate(dict(manifest))
        except ValidationError as exc:
            field = str(exc.errors()[0]["loc"][0])
            expected = cls.model_fields[field].description
            shown = short_repr(manifest[field], limit=60)
            raise UserError(
                f"{path}: field {field!r} must be {expected}, got {shown}; fix it or rebuild the index"
            ) from None

    @classmethod
    def of(cls, manifest: Mapping[str, Any]) -> IndexManifest:
        """The typed manifest of one this toolkit made (a build's, a merge's, a save's): a wrong type is a bug."""
        return cls.model_validate(dict(manifest))

    @property
    def stored_count(self) -> int:
        """Vectors in the FAISS index: `stored`, or `count` for manifests written before removals were hidden."""
        return self.count if self.stored is None else self.stored

    def as_dict(self) -> dict[str, Any]:
        """The manifest as JSON-ready data, with exactly the fields it was made from."""
        return self.model_dump(exclude_unset=True)


def _built_kind(kind: str) -> str:
    """`kind` if it names a row of `KINDS`."""
    if kind not in _BUILT_KINDS:
        raise ValueError(f"not one of {_BUILT_KINDS}")
    return kind
