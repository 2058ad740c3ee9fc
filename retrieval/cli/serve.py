"""`retrieval serve`: the search page and JSON API of an index, with uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

from retrieval.core.rerank import rerank_at_query

__all__ = ["add_parser", "run"]

# Seconds an idle keep-alive connection stays open (uvicorn's default, written out: it is a server timeout).
_KEEP_ALIVE_S = 5


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="serve an index: a search page and a JSON API")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--index", type=Path, metavar="INDEX_DIR", help="from `retrieval index build`")
    source.add_argument(
        "--backend",
        metavar="URI",
        help="a vector database collection from `retrieval index export`: qdrant+local:///abs/dir?collection=NAME "
        "or qdrant://HOST[:PORT]/NAME; search and filters run in the database",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    model = parser.add_mutually_exclusive_group()
    model.add_argument(
        "--checkpoint", type=Path, metavar="CKPT", help="default: the one the index records (must be the same file)"
    )
    model.add_argument(
        "--model", type=Path, metavar="EXPORT_DIR", help="for an index built from an export: default the one it records"
    )
    parser.add_argument("--device", default="auto", help="where the model runs: auto | cpu | cuda (default: auto)")
    parser.add_argument(
        "--search-threads",
        type=int,
        default=1,
        help="FAISS threads per search (default: 1; concurrent requests already use the cores, and fanning one "
        "query out over threads mostly adds wake-up latency)",
    )
    parser.add_argument(
        "--image-root",
        type=Path,
        metavar="DIR",
        help="results show image paths relative to DIR, and images outside it by id only (default: the deepest "
        "folder holding every image indexed at start; never an absolute path)",
    )
    parser.add_argument("--openapi", action="store_true", help="also serve /openapi.json and the /docs page")
    parser.add_argument(
        "--rerank",
        metavar="SPEC",
        help="re-rank every search: qe or kreciprocal with the parameters evaluate --rerank chose, e.g. qe:k=2,alpha=3",
    )
    parser.add_argument(
        "--reranker",
        type=Path,
        metavar="DIR",
        help="re-score searches by image and by id with a learned re-ranker of the index's checkpoint "
        "(retrieval reranker DIR; onnxruntime, reads the results' images)",
    )
    parser.add_argument(
        "--reload-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="look this often for a new version of the index (`index add`/`remove`) and serve it without a "
        "restart (default: 1; 0: never)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=16,
        metavar="N",
        help="embed up to N image queries that arrive together in one forward pass (default: 16; 1: each alone)",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=2.0,
        metavar="MS",
        help="the first image query of a batch waits at most this long for others (default: 2)",
    )
    _add_limits(parser)


def _add_limits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-upload-mb", type=float, default=16.0, help="largest request body (default: 16)")
    parser.add_argument(
        "--max-pixels", type=int, default=40_000_000, help="largest image, width x height (default: 40000000)"
    )
    parser.add_argument(
        "--decode-memory",
        default="1G",
        metavar="SIZE",
        help="memory for images being decoded at once, all requests together, e.g. 1G or 512M (default: 1G, one "
        "image at the pixel cap; each image counts 20 bytes a pixel); a request that finds it full waits "
        "--decode-wait seconds, then gets 503 with Retry-After",
    )
    parser.add_argument(
        "--decode-wait", type=float, default=1.0, metavar="SECONDS", help="see --decode-memory (default: 1)"
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a request body must arrive within this time, or the request gets 408 and its connection is closed "
        "(default: 30)",
    )


def run(args: argparse.Namespace) -> int:
    if args.rerank:
        rerank_at_query(args.rerank)  # a bad spec is refused before the web stack and the index load
    import uvicorn  # the web stack loads only for this command

    from retrieval.index import parse_memory
    from retrieval.serve import ServeLimits, create_app
    from retrieval.serve.batching import BatchPolicy

    limits = ServeLimits(
        max_upload_bytes=int(args.max_upload_mb * 2**20),
        max_pixels=args.max_pixels,
        decode_memory=parse_memory(args.decode_memory) or 0,
        decode_wait=args.decode_wait,
        body_timeout=args.body_timeout,
    )
    batching = BatchPolicy(max_batch=args.max_batch, wait=args.batch_wait_ms / 1000)
    app = create_app(
        args.index,
        checkpoint=args.checkpoint,
        device=args.device,
        limits=limits,
        search_threads=args.search_threads,
        image_root=args.image_root,
        openapi=args.openapi,
        reload_interval=args.reload_interval,
        backend=args.backend,
        model_dir=args.model,
        rerank=args.rerank,
        batching=batching,
        reranker_dir=args.reranker,
    )
    if not _is_loopback(args.host):
        print(f"note: listening on {args.host}: anyone who can reach it can search the index", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_keep_alive=_KEEP_ALIVE_S)
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
