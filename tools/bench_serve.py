"""HTTP load on `retrieval serve` over loopback, with an embedding as input (vector search).

Starts the real server (`python -m retrieval.cli.main serve`) in its own process on a free
loopback port, then runs N concurrent keep-alive clients that each POST `{"vector": ..., "k": K}`
until the request count or the time budget runs out. Prints p50/p99 latency and requests/s, and,
as baselines measured in the same run: `GET /healthz` under the same load (the HTTP floor: no
search) and single-query `SearchIndex.search` called in-process (the search alone, no HTTP).

Without `--index`, it builds a synthetic index of clustered unit vectors (held-out queries).

    python tools/bench_serve.py --n 100000 --dim 128 --clients 8 --requests 4000 --duration 60

Upload mode (`--uploads synthetic` or `--uploads IMAGE_DIR`): image queries, with and without
batching. It exports an untrained `--backbone` at `--image-size` (`retrieval export`), indexes the
images with it, starts two servers on the same index, `--max-batch 16 --batch-wait-ms 2` and
`--max-batch 1`, and at each client count loads them alternately (batched first, then unbatched,
`--rounds` times) with multipart uploads of the images; it prints uploads/s and p50/p99 of each.

    python tools/bench_serve.py --uploads synthetic --clients 1,8,32 --requests 600 --duration 30

Elongated mode (`--elongated HEIGHT`): the hostile upload of issue 36, a 1 x HEIGHT PNG (a few hundred
bytes) sent to a model whose eval is `center_crop`, which scales the shorter side up. It indexes the
synthetic images with an untrained `--backbone` checkpoint at `--image-size` (`augment.eval_mode:
center_crop`), serves it with the default limits, and has `--clients` clients send the PNG while one
more client sends `GET /healthz`; it prints the uploads' statuses and latency, and /healthz p50/p99
beside /healthz alone. A server that refuses the upload from its header answers 413 in milliseconds.

    python tools/bench_serve.py --elongated 400000 --clients 4 --requests 200 --duration 30
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import faiss
import httpx
import numpy as np
from PIL import Image

from retrieval.index import SearchIndex
from retrieval.index.synthetic import clustered_unit_vectors

_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}
_BATCHED = ("--max-batch", "16", "--batch-wait-ms", "2")
_UNBATCHED = ("--max-batch", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, help="an index directory (default: build a synthetic one)")
    parser.add_argument("--n", type=int, default=100_000, help="synthetic index: vectors")
    parser.add_argument("--dim", type=int, default=128, help="synthetic index: dimension")
    parser.add_argument("--type", default="auto", help="synthetic index: kind")
    parser.add_argument("--queries", type=int, default=1000, help="distinct held-out query vectors")
    parser.add_argument("--clients", type=_counts, default=[8], help="concurrent clients, e.g. 8 or 1,8,32")
    parser.add_argument("--requests", type=int, default=4000, help="stop after this many requests in all")
    parser.add_argument("--duration", type=float, default=60.0, help="or after this many seconds")
    parser.add_argument("-k", type=int, default=10, help="results per search")
    parser.add_argument("--uploads", metavar="IMAGE_DIR|synthetic", help="upload mode: query with these images")
    parser.add_argument("--images", type=int, default=64, help="upload mode, synthetic: images (96 x 96 PNG)")
    parser.add_argument("--backbone", default="resnet18", help="upload mode: the untrained timm model exported")
    parser.add_argument("--image-size", type=int, default=64, help="upload mode: its input size")
    parser.add_argument("--rounds", type=int, default=1, help="upload mode: alternations per client count")
    parser.add_argument("--elongated", type=int, metavar="HEIGHT", help="elongated mode: upload a 1 x HEIGHT PNG")
    args = parser.parse_args()
    if args.uploads is not None:
        _uploads(args)
        return
    if args.elongated is not None:
        _elongated(args)
        return

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
            send, floor = _json_post("/search", bodies), _get("/healthz")
            for clients in args.clients:
                _load(base, send, clients, 2 * clients, 10)  # warm-up
                search = _with_server_cpu(server.pid, partial(_load, base, send, clients, args.requests, args.duration))
                health = _with_server_cpu(
                    server.pid, partial(_load, base, floor, clients, args.requests, args.duration)
                )
                _vector_table(args.k, clients, search, health, direct)
        finally:
            server.terminate()
            server.wait(30)


def _vector_table(k: int, clients: int, search: dict, health: dict, direct: dict) -> None:
    print(f"{'':<34}{'requests':>9}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>9}{'server CPU ms/req':>19}")
    for name, result in (
        (f"POST /search (vector, k={k})", search),
        ("GET /healthz (HTTP floor)", health),
        ("SearchIndex.search, 1 thread", direct),
    ):
        cpu = f"{result['cpu_ms']:.3f}" if "cpu_ms" in result else "-"
        print(
            f"{name:<34}{result['requests']:>9}{result['errors']:>8}"
            f"{result['p50']:>9.2f}{result['p99']:>9.2f}{result['rps']:>9.0f}{cpu:>19}"
        )
    print(f"search p50 / HTTP floor p50: {search['p50'] / health['p50']:.2f}x")
    print(f"search p50 / in-process search p50: {search['p50'] / direct['p50']:.1f}x")
    print(f"settings: {clients} clients (threads, keep-alive httpx) and the server share this machine's cores")


def _with_server_cpu(pid: int, load: Callable[[], dict]) -> dict:
    """`load()`'s result plus `cpu_ms`: the server process's CPU time a request (Linux /proc), which other
    processes on the machine barely change, unlike latency."""
    before = _cpu_seconds(pid)
    result = load()
    return {**result, "cpu_ms": (_cpu_seconds(pid) - before) / max(result["requests"], 1) * 1000}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` and its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _uploads(args: argparse.Namespace) -> None:
    """Upload mode: the same index served with and without batching, loaded alternately at each client count."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        folder = _synthetic_images(root / "images", args.images) if args.uploads == "synthetic" else Path(args.uploads)
        paths = sorted(path for path in folder.rglob("*") if path.suffix.lower() in _IMAGE_SUFFIXES)
        if not paths:
            raise SystemExit(f"no images under {folder}")
        index_dir = _exported_index(args, folder, root)
        send = _multipart_post("/search", [path.read_bytes() for path in paths], args.k)
        servers = {"batched": _serve(index_dir, _BATCHED), "unbatched": _serve(index_dir, _UNBATCHED)}
        try:
            results: dict[tuple[int, str], list[dict[str, float]]] = {}
            for base, process in servers.values():
                _wait_until_up(base, process)
                threading.Thread(target=process.stderr.read, daemon=True).start()  # a full pipe would block it
                _load(base, send, 4, 32, 30)  # warm-up: the first passes of onnxruntime are slow
            for clients in args.clients:
                for _ in range(args.rounds):
                    for name, (base, _process) in servers.items():
                        result = _load(base, send, clients, args.requests, args.duration)
                        results.setdefault((clients, name), []).append(result)
                        print(f"{clients} clients, {name}: {result}", file=sys.stderr)
        finally:
            for _base, process in servers.values():
                process.terminate()
                process.wait(30)
    print(f"{len(paths)} images, {args.backbone} at {args.image_size} px (ONNX), k={args.k}; {os.cpu_count()} cores")
    print(f"{'clients':>8}{'server':>11}{'uploads':>9}{'errors':>8}{'uploads/s':>11}{'p50 ms':>9}{'p99 ms':>9}")
    for clients in args.clients:
        rates = {}
        for name in servers:
            runs = results[(clients, name)]
            best = max(runs, key=lambda run: run["rps"])
            rates[name] = best["rps"]
            print(
                f"{clients:>8}{name:>11}{best['requests']:>9}{best['errors']:>8}"
                f"{best['rps']:>11.1f}{best['p50']:>9.1f}{best['p99']:>9.1f}"
            )
        print(f"{'':>8}{'batched / unbatched uploads/s':>40}: {rates['batched'] / rates['unbatched']:.2f}x")


def _elongated(args: argparse.Namespace) -> None:
    """Elongated mode: a center_crop model's server under `args.clients` clients sending a 1 x HEIGHT PNG."""
    buffer = io.BytesIO()
    Image.new("RGB", (1, args.elongated), (9, 9, 9)).save(buffer, "PNG")
    upload = _multipart_post("/search", [buffer.getvalue()], args.k)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        index_dir, checkpoint = _center_crop_index(args, _synthetic_images(root / "images", args.images), root)
        base, server = _serve(index_dir, ("--checkpoint", str(checkpoint), "--device", "cpu"))
        try:
            _wait_until_up(base, server)
            threading.Thread(target=server.stderr.read, daemon=True).start()  # a full pipe would block it
            health = _get("/healthz")
            alone = _load(base, health, 1, args.requests, args.duration)
            statuses: list[int] = []
            status_of = _statuses(upload, statuses)
            results: dict[str, dict[str, float]] = {}
            clients = args.clients[0]
            load = threading.Thread(
                target=lambda: results.update(uploads=_load(base, status_of, clients, args.requests, args.duration))
            )
            load.start()
            results["health"] = _while_alive(base, health, load)
            load.join()
            uploads = results["uploads"]
        finally:
            server.terminate()
            server.wait(30)
    print(f"1 x {args.elongated} PNG ({len(buffer.getvalue())} bytes) to {args.backbone} at {args.image_size} px,")
    print(f"center_crop, default limits; {args.clients[0]} upload clients + 1 /healthz client; {os.cpu_count()} cores")
    print(f"upload statuses: {dict(sorted(Counter(statuses).items()))}")
    print(f"{'':<34}{'requests':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name, result in (
        ("POST /search (the 1 x H PNG)", uploads),
        ("GET /healthz during the uploads", results["health"]),
        ("GET /healthz alone", alone),
    ):
        print(f"{name:<34}{result['requests']:>9}{result['p50']:>9.1f}{result['p99']:>9.1f}{result['max']:>9.1f}")


def _while_alive(base: str, send: Send, other: threading.Thread) -> dict[str, float]:
    """One client sending `send` for as long as `other` runs (at least one request): the latency under its load."""
    times = []
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=120) as http:
        while other.is_alive() or not times:
            t = time.perf_counter()
            send(http, len(times))
            times.append(time.perf_counter() - t)
    return _summary(times, 0, time.perf_counter() - started)


def _statuses(send: Send, statuses: list[int]) -> Send:
    """`send`, recording every answer's status (list.append is atomic under the GIL)."""

    def recorded(http: httpx.Client, i: int) -> httpx.Response:
        response = send(http, i)
        statuses.append(response.status_code)
        return response

    return recorded


def _center_crop_index(args: argparse.Namespace, images: Path, root: Path) -> tuple[Path, Path]:
    """An untrained `args.backbone` checkpoint whose eval is center_crop, and a flat index of `images` built with it."""
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.cli.main import main as retrieval_main
    from retrieval.config import Config, ModelConfig, config_to_dict
    from retrieval.models import Embedder

    torch.manual_seed(0)
    model_config = ModelConfig(backbone=args.backbone, embedding_dim=128, pretrained=False)
    config = Config(model=model_config)
    config.data.image_size = args.image_size
    config.augment.eval_mode = "center_crop"
    model = Embedder(**model_config.model_dump())
    Checkpoint(model.state_dict(), model_config, config_to_dict(config), num_classes=0).save(root / "model.pt")
    build = ["index", "build", "--checkpoint", str(root / "model.pt"), "--images", str(images)]
    if retrieval_main([*build, "--out", str(root / "index"), "--type", "flat", "--num-workers", "0"]) != 0:
        raise SystemExit("index build failed")
    return root / "index", root / "model.pt"


def _synthetic_images(folder: Path, count: int) -> Path:
    """`count` noisy colour PNGs of 96 x 96 in 8 classes (subfolders): small to decode, distinct to embed."""
    rng = np.random.default_rng(0)
    for i in range(count):
        label = i % 8
        (folder / str(label)).mkdir(parents=True, exist_ok=True)
        colour = np.asarray([30 * label, 255 - 30 * label, (97 * i) % 256])
        pixels = np.clip(colour + rng.normal(0, 25, size=(96, 96, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / str(label) / f"{i}.png")
    return folder


def _exported_index(args: argparse.Namespace, images: Path, root: Path) -> Path:
    """An untrained `args.backbone` checkpoint, its ONNX export, and a flat index of `images` built with it."""
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.cli.main import main as retrieval_main
    from retrieval.config import Config, ModelConfig, config_to_dict
    from retrieval.models import Embedder

    torch.manual_seed(0)
    model_config = ModelConfig(backbone=args.backbone, embedding_dim=128, pretrained=False)
    config = Config(model=model_config)
    config.data.image_size = args.image_size
    model = Embedder(**model_config.model_dump())
    Checkpoint(model.state_dict(), model_config, config_to_dict(config), num_classes=0).save(root / "model.pt")
    export = ["export", "--checkpoint", str(root / "model.pt"), "--out", str(root / "onnx")]
    build = ["index", "build", "--model", str(root / "onnx"), "--images", str(images), "--out", str(root / "index")]
    if retrieval_main(export) != 0 or retrieval_main([*build, "--type", "flat", "--num-workers", "0"]) != 0:
        raise SystemExit("export or index build failed")
    return root / "index"


def _serve(index_dir: Path, options: tuple[str, ...]) -> tuple[str, subprocess.Popen]:
    port = _free_port()
    command = [sys.executable, "-m", "retrieval.cli.main", "serve", "--index", str(index_dir), "--port", str(port)]
    process = subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return f"http://127.0.0.1:{port}", process


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


Send = Callable[[httpx.Client, int], httpx.Response]


def _json_post(path: str, bodies: list[bytes]) -> Send:
    headers = {"content-type": "application/json"}
    return lambda http, i: http.post(path, content=bodies[i % len(bodies)], headers=headers)


def _get(path: str) -> Send:
    return lambda http, i: http.get(path)


def _multipart_post(path: str, images: list[bytes], k: int) -> Send:
    return lambda http, i: http.post(
        path, files={"image": ("q.png", io.BytesIO(images[i % len(images)]), "image/png")}, data={"k": str(k)}
    )


def _load(base: str, send: Send, clients: int, limit: int, seconds: float):
    """`clients` threads send requests until `limit` requests in all or `seconds` have passed."""
    lock = threading.Lock()
    issued = [0]
    times: list[float] = []
    errors = [0]
    deadline = time.perf_counter() + seconds

    def client(offset: int) -> None:
        with httpx.Client(base_url=base, timeout=60) as http:
            while time.perf_counter() < deadline:
                with lock:
                    if issued[0] >= limit:
                        return
                    issued[0] += 1
                    number = issued[0] + offset
                t = time.perf_counter()
                response = send(http, number)
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


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _summary(times: list[float], errors: int, wall: float) -> dict[str, float]:
    ms = np.asarray(times) * 1000
    return {
        "requests": len(ms),
        "errors": errors,
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "max": float(ms.max()),
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
