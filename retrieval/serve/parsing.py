"""Reading a request: its body within a size and a time limit, and each field checked into a 4xx.

Everything here treats the request as hostile: numbers outside int64 or float32, JSON nested
thousands deep, Unicode digits and clients that stop sending halfway are answered with a
`RequestError`, never an exception that becomes a 500.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated, Any

import numpy as np
from fastapi import Request
from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect

from retrieval.errors import UserError, short_repr
from retrieval.index.filter_language import Filter, parse_filter, parse_where
from retrieval.serve.errors import RequestError
from retrieval.validation import user_error

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_K",
    "SearchBody",
    "parse_id",
    "parse_filter_field",
    "parse_k",
    "parse_vector",
    "read_body",
    "read_json",
    "read_upload",
]

MAX_K = 1000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_CLOSE = {"Connection": "close"}  # a body left half-read cannot be followed by another request


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, refused with 413 once it grows past `limit` bytes and 408 if it takes over `timeout` s."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"request body of {declared} bytes is over the limit of {limit}", _CLOSE)
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    stream = request.stream()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), timeout=max(deadline - time.monotonic(), 0))
        except StopAsyncIteration:
            return b"".join(chunks)
        except ClientDisconnect as exc:
            raise RequestError(400, "the client disconnected before sending the whole body") from exc
        except asyncio.TimeoutError as exc:
            message = f"request body did not arrive within {timeout:g} s; send it whole, faster"
            raise RequestError(408, message, _CLOSE) from exc
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"request body is over the limit of {limit} bytes", _CLOSE)
        chunks.append(chunk)


async def read_upload(request: Request, body: bytes) -> tuple[bytes, int, Any, Any]:
    """The `image` file, optional `k`, and the raw `filter` and `min_score` fields of a multipart body already read.

    The filter is left for `parse_filter_field`, which the app runs off the event loop.
    """

    async def replay() -> dict[str, Any]:  # an ASGI `http.request` message, Starlette's `receive` type
        return {"type": "http.request", "body": body, "more_body": False}

    form = await Request(request.scope, replay).form(max_files=1, max_fields=4)
    try:
        upload = form.get("image")
        if not isinstance(upload, UploadFile):
            raise RequestError(400, "multipart upload needs an 'image' file field")
        k = form.get("k", "10")
        where = form.get("filter")
        return await upload.read(), parse_k(_form_int(k)), _form_json(where), form.get("min_score")
    finally:
        await form.close()


def _form_int(value: Any) -> Any:
    """A form field of ASCII digits as an int; anything else (such as '²', a digit `int()` refuses) as it is."""
    digits = isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()
    return int(value) if digits else value


def _form_json(value: Any) -> Any:
    """A form field holding a JSON object as that object; any other text (a where-expression) as it is."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except (ValueError, RecursionError) as exc:
            raise RequestError(400, f"filter is not valid JSON: {exc}") from exc
    return value


def read_json(body: bytes) -> SearchBody:
    """A JSON search body (`SearchBody`); any other JSON (or none) is a 400."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"invalid JSON: {exc}") from exc
    except RecursionError as exc:
        raise RequestError(400, "invalid JSON: nested too deeply") from exc
    try:
        return SearchBody.model_validate(payload)
    except ValidationError as exc:  # the fields raise RequestError themselves; this is a safety net
        raise RequestError(400, str(user_error(SearchBody, exc, "body"))) from None


def parse_k(k: Any) -> int:
    """`k` as an int in [1, MAX_K]."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise RequestError(400, f"k must be an integer between 1 and {MAX_K}, got {short_repr(k)}")
    return k


def parse_id(item_id: Any) -> int:
    """An item id as an int; whether it exists (and fits int64) is the index's question, a 404."""
    if isinstance(item_id, bool) or not isinstance(item_id, int):
        raise RequestError(400, f"id must be an integer, got {short_repr(item_id)}")
    return item_id


class SearchBody(BaseModel):
    """A JSON search request: a query `vector` or the `id` of an indexed item, and optional `k`, `filter`, `min_score`.

    `k` and `id` are checked here (`parse_k`, `parse_id`); the vector needs the index's dimension
    (`parse_vector`), the filter a worker thread (`parse_filter_field`) and `min_score` the index's
    threshold, so those are checked where the search runs. Other keys are ignored. The checks raise
    `RequestError`, which pydantic passes through: the 400s say what they said before the model.
    """

    model_config = ConfigDict(extra="ignore")

    k: Annotated[int, PlainValidator(parse_k)] = 10
    filter: Any = None
    min_score: Any = None
    vector: Any = None
    id: Annotated[int | None, PlainValidator(parse_id)] = None

    @model_validator(mode="before")
    @classmethod
    def _one_query(cls, payload: Any) -> Any:
        if not isinstance(payload, dict) or ("vector" in payload) == ("id" in payload):
            raise RequestError(400, 'JSON body must be an object with either "vector" or "id" (and optional "k")')
        return payload


def parse_filter_field(value: Any) -> Filter | None:
    """A `filter`: a JSON object (`{"label": {"in": [3, 5]}}`), a where-expression string, or absent (None).

    Parsing is linear in the filter's length, which `MAX_FILTER_CHARS` bounds (a longer one is a
    400); the app still runs it in a worker thread, so a long filter never holds other requests.
    Whether its columns exist and hold its values' types is the index's question, asked when searching.
    """
    if value is None or value == "":
        return None
    try:
        if isinstance(value, dict):
            return parse_filter(value)
        if isinstance(value, str):
            return parse_where(value)
    except UserError as exc:
        raise RequestError(400, str(exc)) from exc
    raise RequestError(400, f"filter must be a JSON object or a where-expression string, got {short_repr(value)}")


def parse_vector(values: Any, dim: int) -> np.ndarray:
    """A `(D,)` float32 unit vector; the query is normalized so scores are cosine similarities.

    Values must be finite and within float32's range (|v| <= 3.4e38), as the index stores them.
    """
    if not isinstance(values, list) or len(values) != dim:
        got = f"{len(values)} values" if isinstance(values, list) else type(values).__name__
        raise RequestError(400, f"vector must be a list of {dim} numbers (the index dimension), got {got}")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise RequestError(400, "vector must hold numbers only")
    try:
        vector = np.asarray([float(v) for v in values], dtype=np.float64)
    except OverflowError as exc:  # an integer like 10**400
        raise RequestError(400, f"vector values must be within float32 range (|v| <= {_FLOAT32_MAX:.3g})") from exc
    if not np.isfinite(vector).all():
        raise RequestError(400, "vector holds NaN or infinity")
    largest = float(np.abs(vector).max())
    if largest > _FLOAT32_MAX:
        raise RequestError(400, f"vector values must be within float32 range (|v| <= {_FLOAT32_MAX:.3g})")
    if largest == 0.0:
        raise RequestError(400, "vector is all zeros; it has no direction to search")
    scaled = vector / largest  # no overflow or underflow in the norm, whatever the magnitude
    return (scaled / np.linalg.norm(scaled)).astype(np.float32)
