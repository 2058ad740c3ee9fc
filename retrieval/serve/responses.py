"""The search service's answers as records: what `/search`, `/items/{id}` and `/healthz` send back.

They are the routes' FastAPI response models, so `/openapi.json` describes each field; `/search`
builds its `SearchResponse` in the worker thread and serializes it there (`create_app`: fields left
unset, an image query's `id`, are left out), the other
routes leave that to FastAPI. `/info` is `IndexInfo`: the manifest's public fields
(`retrieval.serve.public.public_info`), those a manifest lacks left out.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, JsonValue

from retrieval.core.match_threshold import MatchThreshold
from retrieval.index.manifest import Measured
from retrieval.validation import Record

__all__ = ["Column", "Health", "IndexInfo", "Item", "PublicModel", "SearchQuery", "SearchResponse", "SearchResult"]


class Item(Record):
    """One indexed item as the API shows it: never an absolute path."""

    id: int
    label: Any = Field(description="the metadata's `label` column, or null")
    path: str | None = Field(description="the image path relative to the image root; null when outside it")
    # The user's own metadata columns, of the types their files gave them: free-form by design.
    metadata: dict[str, Any] = Field(description="every public metadata column, `path` shown as above")
    thumb: str = Field(description="the URL of the item's thumbnail")


class SearchResult(Item):
    """An item found by a search, with its score."""

    score: float = Field(description="cosine similarity of the query and the item (higher is closer)")


class SearchQuery(Record):
    """What was searched with: an uploaded image, a vector, or an indexed item (`id`, left out of its results)."""

    type: Literal["image", "vector", "id"]
    id: int | None = None


class SearchResponse(Record):
    """The answer to `POST /search`: results best first, none below `min_score` (so possibly fewer than k)."""

    query: SearchQuery
    k: int
    min_score: float | None = Field(description="the minimum applied (the stored threshold's number for 'stored')")
    results: list[SearchResult]
    took_ms: float


class Health(Record):
    """`GET /healthz`: the service answers, how many vectors it searches, and whether it can embed images."""

    status: Literal["ok"]
    vectors: int
    model: bool


class Column(Record):
    """A metadata column a filter may name, and its type in the filter language (`int`, `float`, `str`, `bool`)."""

    name: str
    type: str = Field(description="int, float, str, bool, or Arrow's name of another type")


class PublicModel(Record):
    """What `/info` shows of the model: its identity, sizes and preprocessing, never a file path."""

    model_config = ConfigDict(populate_by_name=True)

    checkpoint_sha256: str | None = None
    onnx_sha256: str | None = None
    embedding_dim: int | None = None
    image_size: int | None = None
    # Copies of the checkpoint's own records (its eval transform and `ModelConfig`), passed on as JSON.
    transform: dict[str, JsonValue] | None = None
    model_settings: dict[str, JsonValue] | None = Field(
        default=None, validation_alias="model_config", serialization_alias="model_config"
    )


class IndexInfo(Record):
    """`GET /info`: the index's shape, kind, measured quality and model identity, and the columns to filter on.

    Only the manifest's public fields; one a manifest lacks is left out of the answer.
    """

    format: str | None = None
    version: int | None = None
    kind: str | None = None
    factory: str | None = None
    dimension: int
    metric: str | None = None
    normalized: bool | None = None
    count: int | None = None
    created: str | None = None
    match_threshold: MatchThreshold | None = None
    columns: list[Column]
    measured: Measured | None = None
    model: PublicModel | None = None
    backend: Literal["qdrant"] | None = Field(default=None, description="set when a database serves the index")
