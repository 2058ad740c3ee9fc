"""The search service's answers as records: what `/search`, `/items/{id}` and `/healthz` send back.

They are the routes' FastAPI response models, so `/openapi.json` describes each field; `/search`
builds its `SearchResponse` in the worker thread and serializes it there (`create_app`: fields left
unset, an image query's `id`, are left out), the other
routes leave that to FastAPI. `/info` stays a plain object: it is the manifest's public fields,
which vary with the index (`retrieval.serve.public.public_info`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from retrieval.validation import Record

__all__ = ["Health", "Item", "SearchQuery", "SearchResponse", "SearchResult"]


class Item(Record):
    """One indexed item as the API shows it: never an absolute path."""

    id: int
    label: Any = Field(description="the metadata's `label` column, or null")
    path: str | None = Field(description="the image path relative to the image root; null when outside it")
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
