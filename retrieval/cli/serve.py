"""`retrieval serve`: the search page and JSON API of an index, with uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="serve an index: a search page and a JSON API")
    parser.add_argument("--index", type=Path, required=True, metavar="INDEX_DIR", help="from `retrieval index build`")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    parser.add_argument(
        "--checkpoint", type=Path, metavar="CKPT", help="default: the one the index records (must be the same file)"
    )
    parser.add_argument("--device", default="auto", help="where the model runs: auto | cpu | cuda (default: auto)")
    parser.add_argument(
        "--search-threads",
        type=int,
        default=1,
        help="FAISS threads per search (default: 1; concurrent requests already use the cores, and fanning one "
        "query out over threads mostly adds wake-up latency)",
    )
    parser.add_argument("--max-upload-mb", type=float, default=16.0, help="largest request body (default: 16)")


def run(args: argparse.Namespace) -> int:
    import uvicorn  # the web stack loads only for this command

    from retrieval.serve import ServeLimits, create_app

    limits = ServeLimits(max_upload_bytes=int(args.max_upload_mb * 2**20))
    app = create_app(
        args.index, checkpoint=args.checkpoint, device=args.device, limits=limits, search_threads=args.search_threads
    )
    if not _is_loopback(args.host):
        print(f"note: listening on {args.host}: anyone who can reach it can search the index", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
