"""HTTP load on `retrieval serve` over loopback, with an embedding as input (vector search).

Starts the real server (`python -m retrieval.cli.main serve`) in its own process on a free
loopback port, then runs N concurrent keep-alive clients that each POST `{"vector": ..., "k": K}`
until the request count or the time budget runs out. Prints p50/p99 latency and requests/s, and,
as baselines measured in the same run: `GET /healthz` under the same load (the HTTP floor: no
search) and single-query `SearchIndex.search` called in-process (the search alone, no HTTP).

Without `--index`, it builds a synthetic index of clustered unit vectors (held-out queries).

    python tools/bench_serve.py --n 100000 --dim 128 --clients 8 --requests 4000 --duration 60
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import faiss
import httpx
import numpy as np

from retrieval.index import SearchIndex
from retrieval.index.synthetic import clustered_unit_vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, help="an index directory (default: build a synthetic one)")
    parser.add_argument("--n", type=int, default=100_000, help="synthetic index: vectors")
    parser.add_argument("--dim", type=int, default=128, help="synthetic index: dimension")
    parser.add_argument("--type", default="auto", help="synthetic index: kind")
    parser.add_argument("--queries", type=int, default=1000, help="distinct held-out query vectors")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=4000, help="stop after this many requests in all")
    parser.add_argument("--duration", type=float, default=60.0, help="or after this many seconds")
    parser.add_argument("-k", type=int, default=10, help="results per search")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        index_dir, queries = _index_and_queries(args, Path(scratch))
        index = SearchIndex.load(index_dir)
        print(f"index: {index.ntotal} x {index.dim} ({index.kind}, {index.factory}); threads: {os.cpu_count()} cores")
        faiss.omp_set_num_threads(1)  # as `retrieval serve` runs its searches (--search-threads 1)
        direct = _direct_latencies(index, queries, args.k, args.requests)
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "retrieval.cli.main", "serve", "--index", str(index_dir), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_until_up(base, server)
            bodies = [json.dumps({"vector": q.tolist(), "k": args.k}).encode() for q in queries]
            _load(base, "POST", "/search", bodies[: args.clients], args.clients, 2 * args.clients, 10)  # warm-up
            search = _load(base, "POST", "/search", bodies, args.clients, args.requests, args.duration)
            health = _load(base, "GET", "/healthz", [b""], args.clients, args.requests, args.duration)
        finally:
            server.terminate()
            server.wait(30)

    print(f"{'':<34}{'requests':>9}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}")
    for name, result in (
        (f"POST /search (vector, k={args.k})", search),
        ("GET /healthz (HTTP floor)", health),
        ("SearchIndex.search, 1 thread", direct),
    ):
        print(
            f"{name:<34}{result['requests']:>9}{result['errors']:>8}"
            f"{result['p50']:>9.2f}{result['p99']:>9.2f}{result['rps']:>9.0f}"
        )
    print(f"search p50 / HTTP floor p50: {search['p50'] / health['p50']:.2f}x")
    print(f"search p50 / in-process search p50: {search['p50'] / direct['p50']:.1f}x")
    print(f"settings: {args.clients} clients (threads, keep-alive httpx) and the server share this machine's cores")


def _index_and_queries(args: argparse.Namespace, scratch: Path) -> tuple[Path, np.ndarray]:
    if args.index is not None:  # any index: random unit queries
        queries = np.random.default_rng(0).standard_normal((args.queries, SearchIndex.load(args.index).dim))
        return args.index, (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    vectors, _ = clustered_unit_vectors(args.n + args.queries, args.dim, seed=0)
    index = SearchIndex.build(vectors[: args.n], kind=args.type, progress=False)
    index.save(scratch / "index")
    return scratch / "index", vectors[args.n :]


def _direct_latencies(index: SearchIndex, queries: np.ndarray, k: int, count: int) -> dict[str, float]:
    times = []
    started = time.perf_counter()
    for i in range(count):
        t = time.perf_counter()
        index.search(queries[i % len(queries)][None], k=k)
        times.append(time.perf_counter() - t)
    return _summary(times, 0, time.perf_counter() - started)


def _load(base: str, method: str, path: str, bodies: list[bytes], clients: int, limit: int, seconds: float):
    """`clients` threads send requests until `limit` requests in all or `seconds` have passed."""
    lock = threading.Lock()
    issued = [0]
    times: list[float] = []
    errors = [0]
    deadline = time.perf_counter() + seconds

    def client(offset: int) -> None:
        headers = {"content-type": "application/json"}
        with httpx.Client(base_url=base, timeout=60) as http:
            while time.perf_counter() < deadline:
                with lock:
                    if issued[0] >= limit:
                        return
                    issued[0] += 1
                    body = bodies[(issued[0] + offset) % len(bodies)]
                t = time.perf_counter()
                response = http.request(method, path, content=body or None, headers=headers if body else None)
                elapsed = time.perf_counter() - t
                with lock:
                    times.append(elapsed)
                    errors[0] += response.status_code != 200

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return _summary(times, errors[0], time.perf_counter() - started)


def _summary(times: list[float], errors: int, wall: float) -> dict[str, float]:
    ms = np.asarray(times) * 1000
    return {
        "requests": len(ms),
        "errors": errors,
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "rps": len(ms) / wall,
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(base: str, server: subprocess.Popen) -> None:
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"server exited: {server.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit("server did not start in 120 s")


if __name__ == "__main__":
    main()
