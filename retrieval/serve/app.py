"""The search service: a FastAPI app over one index and the model that built it.

Routes: `POST /search` (an uploaded image, a vector, or an id for "more like this"),
`GET /items/{id}`, `GET /thumb/{id}`, `GET /healthz`, `GET /info`, and `GET /` (the search page).

The model and the index load once, in `create_app`. Decoding, embedding and searching run in
the threadpool, never on the event loop; one lock serializes the model and one the index (FAISS
and torch already use every core for one call, and search parameters are index state). The only
image files ever read are the ones listed in the index's metadata, looked up by id.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.inference.encoder import ImageEncoder, encoder_for_index
from retrieval.serve.images import ImageTooLarge, decode_image, thumbnail

__all__ = ["MAX_K", "ServeLimits", "create_app"]

MAX_K = 1000
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeLimits:
    """What one request may cost; anything over a limit is a 4xx, never a crash."""

    max_upload_bytes: int = 16 * 2**20  # request body (an uploaded image or a JSON vector)
    max_pixels: int = 40_000_000  # decoded image size (8k x 5k); larger ones are decompression bombs
    max_file_bytes: int = 64 * 2**20  # an indexed image file read for a thumbnail
    thumb_size: int = 256  # thumbnail longest side in pixels
    thumb_cache: int = 4096  # thumbnails kept in memory (a few MB at ~10 KB each)


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Searcher:
    """The index, the model and their locks; every method is blocking and runs in the threadpool."""

    def __init__(
        self, index: SearchIndex, encoder: ImageEncoder | None, limits: ServeLimits, search_threads: int
    ) -> None:
        self.index = index
        self.encoder = encoder
        self.limits = limits
        self.search_threads = search_threads
        self._model_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self.thumbnail = lru_cache(maxsize=limits.thumb_cache)(self._thumbnail)

    def item(self, item_id: int) -> dict[str, Any]:
        try:
            with self._index_lock:
                (row,) = self.index.metadata_for([item_id])
        except UserError as exc:
            raise _RequestError(404, f"unknown id {item_id}") from exc
        return _item(row)

    def by_image(self, data: bytes, k: int) -> list[dict[str, Any]]:
        if self.encoder is None:
            raise _RequestError(400, "this index records no model; search it by vector or id")
        try:
            image = decode_image(data, self.limits.max_pixels)
        except ImageTooLarge as exc:
            raise _RequestError(413, str(exc)) from exc
        except UserError as exc:
            raise _RequestError(400, str(exc)) from exc
        with self._model_lock:
            vector = self.encoder.embed_images([image])
        return self._search(vector, k)

    def by_vector(self, vector: np.ndarray, k: int) -> list[dict[str, Any]]:
        return self._search(vector[None], k)

    def by_id(self, item_id: int, k: int) -> list[dict[str, Any]]:
        """More like this: the item's nearest neighbours, the item itself left out."""
        self.item(item_id)  # 404 for an unknown id
        with self._index_lock:
            vector = np.asarray(self.index.reconstruct(item_id), dtype=np.float32)
        results = self._search(vector[None], min(k + 1, MAX_K + 1))
        return [result for result in results if result["id"] != item_id][:k]

    def _search(self, vectors: np.ndarray, k: int) -> list[dict[str, Any]]:
        # OpenMP's thread count is per calling thread: set it in this threadpool worker, not once at start.
        faiss.omp_set_num_threads(self.search_threads)
        with self._index_lock:
            scores, ids = self.index.search(vectors, k=k)
            found = ids[0] >= 0  # FAISS pads with -1 when fewer than k vectors are stored
            rows = self.index.metadata_for(ids[0][found])
        return [{**_item(row), "score": float(score)} for score, row in zip(scores[0][found], rows, strict=True)]

    def _thumbnail(self, item_id: int) -> tuple[bytes, str]:
        listed = self.item(item_id)["path"]  # the only way a file name reaches the disk: the index's metadata
        if not listed:
            raise _RequestError(404, f"item {item_id} has no image path in the index metadata")
        path = Path(listed)
        try:
            size = path.stat().st_size
            if size > self.limits.max_file_bytes:
                raise _RequestError(404, f"the image of item {item_id} is too large for a thumbnail ({size} bytes)")
            return thumbnail(path.read_bytes(), self.limits.thumb_size, self.limits.max_pixels)
        except (OSError, UserError) as exc:
            raise _RequestError(404, f"the image of item {item_id} cannot be read ({exc.__class__.__name__})") from exc


def _item(row: dict[str, Any]) -> dict[str, Any]:
    item_id = int(row["id"])
    return {
        "id": item_id,
        "label": row.get("label"),
        "path": row.get("path"),
        "metadata": row,
        "thumb": f"/thumb/{item_id}",
    }


def create_app(
    index_dir: str | Path,
    checkpoint: str | Path | None = None,
    device: str = "auto",
    limits: ServeLimits | None = None,
    search_threads: int = 1,
) -> FastAPI:
    """Load the index in `index_dir` and the model it records, and return the app serving them.

    Args:
        index_dir: a directory written by `retrieval index build`.
        checkpoint: the index's checkpoint if it moved (must be the same file, by sha256).
        device: where the model runs (`auto`, `cpu`, `cuda`).
        limits: request limits (`ServeLimits()` by default).
        search_threads: FAISS (OpenMP) threads per search. One: concurrent requests already use the
            cores, and fanning a single query out over threads mostly adds wake-up latency (on a
            busy 2-core machine, 0.2 ms with one thread vs 70 ms with two for a 20k flat search).

    Raises:
        UserError: the index or its checkpoint cannot be loaded.
    """
    limits = limits or ServeLimits()
    if search_threads < 1:
        raise UserError(f"search_threads must be >= 1, got {search_threads}")
    index = SearchIndex.load(index_dir)
    model_info = index.manifest.get("model") or {}
    encoder = encoder_for_index(model_info, checkpoint, device) if model_info.get("checkpoint_sha256") else None
    searcher = _Searcher(index, encoder, limits, search_threads)
    static = Path(str(resources.files("retrieval.serve") / "static"))
    page = (static / "index.html").read_text()

    app = FastAPI(title="retrieval search", docs_url=None, redoc_url=None)
    app.state.searcher = searcher
    app.mount("/static", StaticFiles(directory=static), name="static")

    @app.exception_handler(_RequestError)
    async def _request_error(request: Request, exc: _RequestError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid request')}"}, status_code=422)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        _log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"error": f"internal error ({exc.__class__.__name__})"}, status_code=500)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "vectors": int(index.ntotal), "model": encoder is not None}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return index.manifest

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, Any]:
        return await run_in_threadpool(searcher.item, item_id)

    @app.get("/thumb/{item_id}")
    async def thumb(item_id: int) -> Response:
        content, media_type = await run_in_threadpool(searcher.thumbnail, item_id)
        return Response(content, media_type=media_type, headers={"Cache-Control": "public, max-age=3600"})

    @app.post("/search")
    async def search(request: Request) -> dict[str, Any]:
        started = time.perf_counter()
        body = await _read_body(request, limits.max_upload_bytes)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "multipart/form-data":
            data, k = await _read_upload(request, body)
            query: dict[str, Any] = {"type": "image"}
            results = await run_in_threadpool(searcher.by_image, data, k)
        elif content_type == "application/json":
            payload = _read_json(body)
            k = _parse_k(payload.get("k", 10))
            if "vector" in payload:
                query = {"type": "vector"}
                results = await run_in_threadpool(searcher.by_vector, _parse_vector(payload["vector"], index.dim), k)
            else:
                item_id = _parse_id(payload["id"])
                query = {"type": "id", "id": item_id}
                results = await run_in_threadpool(searcher.by_id, item_id, k)
        else:
            raise _RequestError(
                415, 'send multipart/form-data with an \'image\' file, or JSON {"vector": [...]} or {"id": N}'
            )
        took_ms = (time.perf_counter() - started) * 1000
        return {"query": query, "k": k, "results": results, "took_ms": round(took_ms, 3)}

    return app


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it grows past `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _RequestError(413, f"request body of {declared} bytes is over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _RequestError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_upload(request: Request, body: bytes) -> tuple[bytes, int]:
    """The `image` file and optional `k` field of a multipart body already read (and size-checked)."""

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    form = await Request(request.scope, replay).form(max_files=1, max_fields=4)
    try:
        upload = form.get("image")
        if not isinstance(upload, UploadFile):
            raise _RequestError(400, "multipart upload needs an 'image' file field")
        k = form.get("k", "10")
        return await upload.read(), _parse_k(int(k) if isinstance(k, str) and k.strip().isdigit() else k)
    finally:
        await form.close()


def _read_json(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _RequestError(400, f"invalid JSON: {exc}") from exc
    if not isinstance(payload, dict) or ("vector" in payload) == ("id" in payload):
        raise _RequestError(400, 'JSON body must be an object with either "vector" or "id" (and optional "k")')
    return payload


def _parse_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise _RequestError(400, f"k must be an integer between 1 and {MAX_K}, got {k!r}")
    return k


def _parse_id(item_id: Any) -> int:
    if isinstance(item_id, bool) or not isinstance(item_id, int):
        raise _RequestError(400, f"id must be an integer, got {item_id!r}")
    return item_id


def _parse_vector(values: Any, dim: int) -> np.ndarray:
    """A `(D,)` float32 unit vector; the query is normalized so scores are cosine similarities."""
    if not isinstance(values, list) or len(values) != dim:
        got = f"{len(values)} values" if isinstance(values, list) else type(values).__name__
        raise _RequestError(400, f"vector must be a list of {dim} numbers (the index dimension), got {got}")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise _RequestError(400, "vector must hold numbers only")
    vector = np.asarray(values, dtype=np.float64)
    if not np.isfinite(vector).all():
        raise _RequestError(400, "vector holds NaN or infinity")
    norm = math.sqrt(float(vector @ vector))
    if norm == 0.0:
        raise _RequestError(400, "vector is all zeros; it has no direction to search")
    return (vector / norm).astype(np.float32)
