"""Filter parsing: time of maximal (64 KiB) filters, and /healthz latency while a server parses them.

Parses a 64 KiB and-chain (`a = 1 and ...`, 6,554 conditions), a 64 KiB chain of distinct
conditions and a 10,000-value JSON `in` list 5 times each; then serves a 20,000-vector flat index
(no model) with `retrieval serve` in a process of its own, times 50 `/healthz` requests idle, and
50 more while 4 clients (another process) keep sending `/search` requests whose filter is the
maximal distinct chain (parsed and applied in the server's worker threads). Prints the machine's
load average beside the figures: the machine is shared.

Usage: python tools/bench_filter_parsing.py [--server-source DIR]
(`--server-source`: serve with the `retrieval` package of another checkout, e.g. the commit before,
for a before/after comparison of the server under the same load.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

import httpx
import numpy as np

from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.index.filter_language import MAX_FILTER_CHARS, parse_filter, parse_where

_CLIENTS = 4
_PINGS = 50


def _parse_times() -> None:
    chain = " and ".join(["a = 1"] * ((MAX_FILTER_CHARS + 5) // 10))
    distinct = _distinct_chain()
    values = {"label": {"in": list(range(10_000))}}
    cases: dict[str, Callable[[], object]] = {
        f"and-chain 'a = 1' ({len(chain):,} chars)": lambda: parse_where(chain),
        f"and-chain 'label = i' ({len(distinct):,} chars)": lambda: parse_where(distinct),
        "JSON 'in' of 10,000 ints": lambda: parse_filter(values),
    }
    for name, parse in cases.items():
        seconds = []
        for _ in range(5):
            started = time.perf_counter()
            parse()
            seconds.append(time.perf_counter() - started)
        print(f"parse {name}: median {statistics.median(seconds) * 1e3:.1f} ms, max {max(seconds) * 1e3:.1f} ms")


def _distinct_chain() -> str:
    text = " and ".join(f"label = {i}" for i in range(7_000))
    return text[:MAX_FILTER_CHARS].rsplit(" and ", 1)[0]


def _healthz_latency(directory: str, server_source: str | None) -> None:
    vectors, _ = clustered_unit_vectors(20_000, 64, n_clusters=50, seed=0)
    index = SearchIndex.build(vectors, {"label": (np.arange(20_000) % 100).tolist()}, kind="flat", progress=False)
    index.save(directory)
    port = _free_port()
    server = subprocess.Popen(  # a server of its own, as `retrieval serve` runs: clients share no GIL with it
        [sys.executable, "-m", "retrieval.cli.main", "serve", "--index", directory, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": server_source} if server_source else None,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base)
        stop = multiprocessing.Event()
        searches = multiprocessing.Value("i", 0)
        flood = multiprocessing.Process(target=_flood, args=(base, stop, searches))
        with httpx.Client(base_url=base, timeout=120) as client:
            idle = _pings(client)
            flood.start()
            time.sleep(1.0)
            busy = _pings(client)
        stop.set()
        flood.join()
    finally:
        server.terminate()
        server.wait()
    print(f"/healthz idle: {_summary(idle)}")
    print(f"/healthz while {_CLIENTS} clients send 64 KiB filters ({searches.value} searches): {_summary(busy)}")


def _flood(base: str, stop: Event, searches: Synchronized) -> None:
    """`_CLIENTS` threads sending searches with a maximal filter until `stop` (in a process of their own)."""
    body = json.dumps({"vector": [1.0] * 64, "k": 5, "filter": _distinct_chain()})

    def client_loop() -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            while not stop.is_set():
                answer = client.post("/search", content=body, headers={"content-type": "application/json"})
                answer.raise_for_status()
                with searches.get_lock():
                    searches.value += 1

    threads = [threading.Thread(target=client_loop) for _ in range(_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_up(base: str) -> None:
    for _ in range(600):
        try:
            httpx.get(f"{base}/healthz", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def _pings(client: httpx.Client) -> list[float]:
    seconds = []
    for _ in range(_PINGS):
        started = time.perf_counter()
        client.get("/healthz")
        seconds.append(time.perf_counter() - started)
        time.sleep(0.02)
    return seconds


def _summary(seconds: list[float]) -> str:
    p50, p99 = np.percentile(seconds, [50, 99]) * 1e3
    return f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(seconds) * 1e3:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-source", metavar="DIR", help="PYTHONPATH of the server (another checkout)")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    _parse_times()
    with tempfile.TemporaryDirectory() as directory:
        _healthz_latency(directory + "/index", args.server_source)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
