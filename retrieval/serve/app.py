"""The search service: a FastAPI app over one index directory and the model that built it.

Routes: `POST /search` (an uploaded image, a vector, or an id for "more like this"; each with an
optional `filter` on metadata, a JSON object or a where-expression, see `retrieval.index.filter_language`,
and an optional `min_score`, a number or "stored", below which results are dropped:
`retrieval.index.min_score`),
`GET /items/{id}`, `GET /thumb/{id}`, `GET /healthz`, `GET /info`, and `GET /` (the search page);
every GET route answers HEAD too. `/openapi.json` and `/docs` only when asked for (`openapi=True`):
a public service need not describe itself to every visitor.

The index follows its directory (`LiveIndex`): `retrieval index add`/`remove` by another process
reach the service within `reload_interval` seconds, without a restart. The work of a request runs
in the threadpool (`Searcher`), never on the event loop. Every refusal is one JSON line,
`{"error": "..."}`, with a 4xx status, or 503 + Retry-After when decode memory is full or the
database of `serve --backend` fails (its message, naming the database's folder or URL, is logged, not sent).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from retrieval.core.rerank import rerank_at_query
from retrieval.errors import BackendFailed, UserError
from retrieval.export.reranker_onnx import IndexReranker, reranker_for_index
from retrieval.index.min_score import keep_matches, min_score_for
from retrieval.serve.backend import Views
from retrieval.serve.batching import BatchPolicy
from retrieval.serve.budget import ServerBusy
from retrieval.serve.database import database_views
from retrieval.serve.errors import RequestError
from retrieval.serve.limits import ServeLimits
from retrieval.serve.live import LiveIndex
from retrieval.serve.parsing import MAX_K, parse_filter_field, read_body, read_json, read_upload
from retrieval.serve.public import PublicPaths
from retrieval.serve.responses import Health, IndexInfo, Item, SearchQuery, SearchResponse, SearchResult
from retrieval.serve.searcher import IndexView, Searcher, load_view

__all__ = ["MAX_K", "ServeLimits", "create_app"]

_log = logging.getLogger(__name__)
_RETRY_AFTER_S = 1
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


def create_app(
    index_dir: str | Path | None,
    checkpoint: str | Path | None = None,
    device: str = "auto",
    limits: ServeLimits | None = None,
    search_threads: int = 1,
    image_root: str | Path | None = None,
    openapi: bool = False,
    reload_interval: float = 1.0,
    backend: str | None = None,
    model_dir: str | Path | None = None,
    rerank: str | None = None,
    batching: BatchPolicy | None = None,
    reranker_dir: str | Path | None = None,
) -> FastAPI:
    """Load the index in `index_dir` (or the collection at `backend`) and its model, and return the app serving them.

    Args:
        index_dir: a directory written by `retrieval index build` (None with `backend`).
        checkpoint: the index's checkpoint if it moved (must be the same file, by sha256).
        device: where the model runs (`auto`, `cpu`, `cuda`).
        limits: request limits (`ServeLimits()` by default).
        search_threads: FAISS (OpenMP) threads per search. One: concurrent requests already use the
            cores, and fanning a single query out over threads mostly adds their wake-up latency
            (docs/benchmarks.md, "Search service").
        image_root: image paths are shown relative to this folder; images outside it are shown by
            id only (`path` null). Default: the deepest folder holding every image indexed at start
            (fixed for the server's life, so that a path a client kept stays valid; pass a root
            that also covers images added later).
        openapi: serve `/openapi.json` and the `/docs` page.
        reload_interval: seconds between two looks for a new version of the index; 0 never reloads.
        backend: instead of `index_dir`, a vector database collection written by `retrieval index
            export` (a URI, see `retrieval.vectordb.uri`); search and filters run in the database.
        model_dir: the index's export directory if it moved (an index built with `--model`; same model.onnx).
        rerank: a re-ranking spec applied to every search (`qe:k=2,alpha=3`, `kreciprocal:...`; see
            `retrieval.core.rerank`), or None.
        batching: how concurrent image queries share a forward pass (`BatchPolicy()`: up to 16, 2 ms).
        reranker_dir: a learned re-ranker of the index's checkpoint (`retrieval reranker`), run by onnxruntime on
            searches by image and by id (a search by vector has no image to compare), or None.

    Raises:
        UserError: the index or its checkpoint cannot be loaded, the limits contradict each other, or
            `rerank` is not a query-time re-ranking spec.
    """
    limits = limits or ServeLimits()
    limits.check()
    reranker = rerank_at_query(rerank) if rerank else None
    if search_threads < 1:
        raise UserError(f"search_threads must be >= 1, got {search_threads}")
    if rerank and reranker_dir is not None:
        raise UserError("--rerank and --reranker are two re-rankings; pass one")
    live = _views(index_dir, backend, checkpoint, device, model_dir, reload_interval)
    learned = None if reranker_dir is None else _learned(reranker_dir, live.current(), device)
    paths = _public_paths(live.current(), image_root)
    searcher = Searcher(live, paths, limits, search_threads, reranker, batching, learned)
    static = Path(str(resources.files("retrieval.serve") / "static"))

    app = FastAPI(
        title="retrieval search",
        openapi_url="/openapi.json" if openapi else None,
        docs_url="/docs" if openapi else None,
    )
    app.state.searcher = searcher
    app.mount("/static", StaticFiles(directory=static), name="static")
    _add_error_handlers(app)
    _add_lookup_routes(app, live, searcher, (static / "index.html").read_text())
    _add_search_route(app, live, searcher, limits)
    return app


def _learned(directory: str | Path, view: IndexView, device: str) -> IndexReranker:
    """The learned re-ranker for the index's model; refused when the index records none or another checkpoint."""
    if view.encoder is None:
        raise UserError("this index records no model, so no re-ranker can be checked against it")
    return reranker_for_index(directory, view.encoder.info(), view.augmentation, device)


def _views(
    index_dir: str | Path | None,
    backend: str | None,
    checkpoint: str | Path | None,
    device: str,
    model_dir: str | Path | None,
    reload_interval: float,
) -> Views[IndexView]:
    """What the service searches: the index directory (followed as it changes) or a database collection."""
    if reload_interval < 0:
        raise UserError(f"reload interval must be >= 0 seconds, got {reload_interval}")
    if backend is not None and index_dir is None:
        return database_views(backend, checkpoint, device, model_dir)
    if index_dir is not None and backend is None:
        return LiveIndex(
            index_dir, lambda path, previous: load_view(path, previous, checkpoint, device, model_dir), reload_interval
        )
    raise UserError("serve either an index directory or a database backend URI, not both or neither")


def _add_lookup_routes(app: FastAPI, live: Views[IndexView], searcher: Searcher, page: str) -> None:
    """The search page, `/healthz`, `/info`, `/items/{id}` and `/thumb/{id}` (GET and HEAD)."""
    get = _get_and_head(app)

    @get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home() -> HTMLResponse:
        return HTMLResponse(page)

    @get("/healthz")
    async def healthz() -> Health:
        view = live.current()
        return Health(status="ok", vectors=int(view.index.ntotal), model=view.encoder is not None)

    @get("/info", response_model_exclude_unset=True)  # a field the manifest lacks is left out, not null
    async def info() -> IndexInfo:
        return live.current().info

    @get("/items/{item_id}")
    async def item(item_id: int) -> Item:
        return await run_in_threadpool(searcher.item, item_id)

    @get("/thumb/{item_id}")
    async def thumb(item_id: int) -> Response:
        content, media_type = await run_in_threadpool(searcher.thumb, item_id)
        return Response(content, media_type=media_type, headers={"Cache-Control": "public, max-age=3600"})


def _add_search_route(app: FastAPI, live: Views[IndexView], searcher: Searcher, limits: ServeLimits) -> None:
    """`POST /search`: an uploaded image (multipart) or a JSON vector or id.

    One worker-thread hop a request (parse, search, answer): each hop hands the request between the
    event loop and a thread, which costs more than a small index's search (docs/benchmarks.md,
    "Search service").
    """

    @app.post("/search", response_model=SearchResponse)  # the endpoint's Response is sent as it is
    async def search(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request, limits.max_upload_bytes, limits.body_timeout)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "multipart/form-data":
            data, k, raw_filter, min_score = await read_upload(request, body)
            return await run_in_threadpool(_search_image, live, searcher, data, k, raw_filter, min_score, started)
        if content_type == "application/json":
            return await run_in_threadpool(_search_json, live, searcher, body, started)
        raise RequestError(
            415, 'send multipart/form-data with an \'image\' file, or JSON {"vector": [...]} or {"id": N}'
        )


def _search_json(live: Views[IndexView], searcher: Searcher, body: bytes, started: float) -> Response:
    """A JSON search (a vector, or an id for "more like this"), parsed off the event loop up to the body limit."""
    payload = read_json(body)
    where = parse_filter_field(payload.filter)
    minimum = _min_score(payload.min_score, live.current())
    if payload.id is None:
        query = SearchQuery(type="vector")
        results = searcher.by_vector(payload.vector, payload.k, where)
    else:
        query = SearchQuery(type="id", id=payload.id)
        searcher.check_min_score(minimum)
        results = searcher.by_id(payload.id, payload.k, where)
    return _answer(started, query, payload.k, minimum, results)


def _search_image(
    live: Views[IndexView], searcher: Searcher, data: bytes, k: int, raw_filter: Any, min_score: Any, started: float
) -> Response:
    """An image search: the upload's embedding against the index."""
    where = parse_filter_field(raw_filter)
    minimum = _min_score(min_score, live.current())
    searcher.check_min_score(minimum)
    return _answer(started, SearchQuery(type="image"), k, minimum, searcher.by_image(data, k, where))


def _answer(started: float, query: SearchQuery, k: int, minimum: float | None, results: list[SearchResult]) -> Response:
    """The `SearchResponse`, serialized here (in the worker thread) rather than by FastAPI on the event loop."""
    results = keep_matches(results, minimum)
    took_ms = round((time.perf_counter() - started) * 1000, 3)
    answer = SearchResponse(query=query, k=k, min_score=minimum, results=results, took_ms=took_ms)
    content = answer.model_dump(exclude_unset=True)  # an image query has no `id`
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=jsonable_encoder)
    return Response(text.encode("utf-8"), media_type="application/json")


def _get_and_head(app: FastAPI) -> Callable[..., Callable[[_Endpoint], _Endpoint]]:
    """A `@get(path, ...)` decorator that routes HEAD to the same endpoint (uvicorn sends no body for HEAD).

    HEAD stays out of the OpenAPI description: one operation per route, as for a plain `@app.get`.
    """

    def get(path: str, include_in_schema: bool = True, **options: Any) -> Callable[[_Endpoint], _Endpoint]:
        def register(endpoint: _Endpoint) -> _Endpoint:
            app.add_api_route(path, endpoint, methods=["GET"], include_in_schema=include_in_schema, **options)
            app.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False, **options)
            return endpoint

        return register

    return get


def _min_score(value: Any, view: IndexView) -> float | None:
    """A request's `min_score` (`min_score_for`), its mistakes a 400."""
    try:
        return min_score_for(value, view.threshold)
    except UserError as exc:
        raise RequestError(400, str(exc)) from exc


def _public_paths(view: IndexView, image_root: str | Path | None) -> PublicPaths:
    if image_root is not None:
        return PublicPaths(image_root)
    return PublicPaths.common_root(row.get("path") for row in view.index.metadata_for(view.index.ids))


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal as `{"error": "one line"}`; an unexpected exception is logged once and is a 500."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(ServerBusy)
    async def _busy(request: Request, exc: ServerBusy) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": str(_RETRY_AFTER_S)})

    @app.exception_handler(BackendFailed)
    async def _backend_failed(request: Request, exc: BackendFailed) -> JSONResponse:
        _log.warning("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(
            {"error": "the search database did not answer; try again later"},
            status_code=503,
            headers={"Retry-After": str(_RETRY_AFTER_S)},
        )

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
