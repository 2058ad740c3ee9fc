"""Soak `retrieval serve`: clients mixing good and hostile requests while other processes edit the index.

Builds a small gallery (flat-colour images, an untrained resnet10t checkpoint) in a temporary
directory, indexes it, starts `python -m retrieval.cli.main serve` on a free loopback port, then
for `--minutes` runs `--clients` keep-alive client threads and, every `--edit-every` seconds, a
`retrieval index add` or `retrieval index remove` process. At the end it checks that no update
was lost (the index on disk and the server both hold exactly the ids the edits leave) and prints
requests, answers by status, p50/p99 latency per kind of request, and the server's memory
(peak, after warm-up, at the end). Exits 1 on any 5xx, transport error, unexpected status or lost
update.

    python tools/soak_serve.py --minutes 10
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
from PIL import Image, PngImagePlugin

_WARM_UP = 0.2  # share of the run before memory counts as warmed up
_SETTLE_S = 30  # seconds the server may take to show the last edit


@dataclasses.dataclass
class Ledger:
    """Every answer, by kind of request; shared by the client threads."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    statuses: Counter = dataclasses.field(default_factory=Counter)
    latencies: dict[str, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    unexpected: list[str] = dataclasses.field(default_factory=list)

    def record(self, kind: str, status: int, seconds: float, expected: set[int]) -> None:
        with self.lock:
            self.statuses[status] += 1
            self.latencies[kind].append(seconds)
            if status not in expected and len(self.unexpected) < 20:
                self.unexpected.append(f"{kind}: {status}")


@dataclasses.dataclass
class Ids:
    """The ids the edits have left in the index (what the server must end up serving)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    live: set[int] = dataclasses.field(default_factory=set)
    removed: set[int] = dataclasses.field(default_factory=set)

    def sample(self, rng: random.Random) -> int:
        with self.lock:
            return rng.choice(sorted(self.live)) if self.live else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the clients run (default: 10)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default: 8)")
    parser.add_argument("--edit-every", type=float, default=3.0, help="seconds between index edits (default: 3)")
    parser.add_argument("--images", type=int, default=60, help="images indexed at the start (default: 60)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak_serve_") as scratch:
        sys.exit(_soak(args, Path(scratch)))


def _soak(args: argparse.Namespace, root: Path) -> int:
    index_dir = _build_index(root, args.images, args.seed)
    ids = Ids(live=set(range(args.images)))
    command = [sys.executable, "-m", "retrieval.cli.main", "serve", "--index", str(index_dir), "--port", "0"]
    command += ["--device", "cpu", "--image-root", str(root)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = _wait_for_port(server)
        memory = _MemoryLog(server.pid)
        memory.start()
        ledger, stop = Ledger(), threading.Event()
        bodies = _Bodies(root, args.seed)
        clients = [
            threading.Thread(target=_client, args=(url, bodies, ids, ledger, stop, args.seed + i))
            for i in range(args.clients)
        ]
        editor = _Editor(root, index_dir, ids, stop, args.edit_every, args.seed)
        started = time.monotonic()
        for thread in (*clients, editor):
            thread.start()
        time.sleep(args.minutes * 60)
        stop.set()
        for thread in (*clients, editor):
            thread.join()
        elapsed = time.monotonic() - started
        lost = [editor.failure] if editor.failure else []
        lost += _lost_updates(url, index_dir, ids)
        memory.stop()
    finally:
        server.terminate()
        server.wait(30)
    return _report(ledger, memory, lost, elapsed, editor.edits)


def _build_index(root: Path, count: int, seed: int) -> Path:
    """`count` flat-colour PNGs in 10 classes, a tiny untrained checkpoint, and their flat index."""
    from retrieval.cli.main import main as retrieval_main

    rng = np.random.default_rng(seed)
    (root / "images").mkdir()
    rows = []
    for i in range(count):
        label = i % 10
        colour = np.asarray([25 * label, 255 - 25 * label, (97 * label) % 256])
        pixels = np.clip(colour + rng.normal(0, 20, size=(40, 40, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / "images" / f"{i}.png")
        rows.append({"path": f"images/{i}.png", "label": label, "split": "test"})
    with (root / "gallery.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    checkpoint = _tiny_checkpoint(root / "model.pt")
    build = ["index", "build", "--checkpoint", str(checkpoint), "--csv", str(root / "gallery.csv")]
    if retrieval_main([*build, "--out", str(root / "index"), "--type", "flat", "--num-workers", "0"]) != 0:
        raise SystemExit("index build failed")
    return root / "index"


def _tiny_checkpoint(path: Path) -> Path:
    """An untrained resnet10t embedder (16-d, 32 px): fast to embed with; the soak measures the service, not recall."""
    import torch

    from retrieval.checkpoint import Checkpoint
    from retrieval.config import Config, ModelConfig, config_to_dict
    from retrieval.models import Embedder

    torch.manual_seed(0)
    model_config = ModelConfig(backbone="resnet10t", embedding_dim=16, pretrained=False)
    config = Config(model=model_config)
    config.data.image_size = 32
    model = Embedder(**model_config.model_dump())
    Checkpoint(model.state_dict(), model_config, config_to_dict(config), num_classes=0).save(path)
    return path


def _wait_for_port(server: subprocess.Popen) -> str:
    deadline = time.monotonic() + 180
    assert server.stderr is not None
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        lines.append(line)
        if not line and server.poll() is not None:
            raise SystemExit(f"the server exited before listening: {''.join(lines[-5:])}")
        match = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
        if match:
            threading.Thread(target=server.stderr.read, daemon=True).start()  # keep the pipe drained
            return match.group(1)
    raise SystemExit("the server did not start in 180 s")


class _Bodies:
    """Request bodies made once: good uploads, and the hostile ones each client mixes in."""

    def __init__(self, root: Path, seed: int) -> None:
        self.uploads = [path.read_bytes() for path in sorted((root / "images").glob("*.png"))[:20]]
        self.large = _png(Image.new("RGB", (4000, 3000), (40, 90, 160)))  # 12 megapixels
        text = PngImagePlugin.PngInfo()
        text.add_text("comment", "a" * 50_000_000, zip=True)
        self.ztxt_bomb = _png(Image.new("RGB", (8, 8)), pnginfo=text)
        self.vectors = np.random.default_rng(seed).standard_normal((50, 16)).tolist()


def _png(image: Image.Image, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG", **options)
    return buffer.getvalue()


_JSON = {"content-type": "application/json"}
_OK, _GONE = {200}, {200, 404}  # an id may be removed by an edit between choosing it and asking for it
_Request = Callable[[httpx.Client, _Bodies, int, random.Random], httpx.Response]
# kind -> (weight, request, statuses that are right for it)
_MIX: dict[str, tuple[int, _Request, set[int]]] = {
    "upload": (12, lambda c, b, i, r: c.post("/search", files={"image": ("q.png", r.choice(b.uploads))}), _OK),
    "upload_large": (1, lambda c, b, i, r: c.post("/search", files={"image": ("q.png", b.large)}), {200, 503}),
    "vector": (15, lambda c, b, i, r: c.post("/search", json={"vector": r.choice(b.vectors), "k": 5}), _OK),
    "id": (12, lambda c, b, i, r: c.post("/search", json={"id": i, "k": 5}), _GONE),
    "item": (12, lambda c, b, i, r: c.get(f"/items/{i}"), _GONE),
    "thumb": (12, lambda c, b, i, r: c.get(f"/thumb/{i}"), _GONE),
    "head": (4, lambda c, b, i, r: c.head(f"/items/{i}"), _GONE),
    "healthz": (4, lambda c, b, i, r: c.get("/healthz"), _OK),
    "bad_image": (3, lambda c, b, i, r: c.post("/search", files={"image": ("x.png", b"not an image")}), {400}),
    "bad_json": (3, lambda c, b, i, r: c.post("/search", content=b"{nope", headers=_JSON), {400}),
    "nested_json": (2, lambda c, b, i, r: c.post("/search", content=b"[" * 5000 + b"]" * 5000, headers=_JSON), {400}),
    "huge_id": (3, lambda c, b, i, r: c.get("/items/9223372036854775808"), {404}),
    "huge_vector": (2, lambda c, b, i, r: c.post("/search", json={"vector": [1e200] * 16}), {400}),
    "unicode_k": (
        2,
        lambda c, b, i, r: c.post("/search", files={"image": ("q", b.uploads[0])}, data={"k": "²"}),
        {400},
    ),
    "ztxt_bomb": (2, lambda c, b, i, r: c.post("/search", files={"image": ("x.png", b.ztxt_bomb)}), {400}),
    "unknown_route": (2, lambda c, b, i, r: c.get("/admin"), {404}),
}


def _client(url: str, bodies: _Bodies, ids: Ids, ledger: Ledger, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    kinds = list(_MIX)
    weights = [_MIX[kind][0] for kind in kinds]
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            kind = rng.choices(kinds, weights)[0]
            _, request, expected = _MIX[kind]
            started = time.perf_counter()
            try:
                status = request(client, bodies, ids.sample(rng), rng).status_code
            except httpx.TransportError:
                status = 0  # no answer at all: always unexpected
            ledger.record(kind, status, time.perf_counter() - started, expected)


class _Editor(threading.Thread):
    """Every `every` seconds, `index add` of two new images or `index remove` of two live ids, each its own process."""

    def __init__(self, root: Path, index_dir: Path, ids: Ids, stop: threading.Event, every: float, seed: int) -> None:
        super().__init__()
        self.root, self.index_dir, self.ids, self.stop, self.every = root, index_dir, ids, stop, every
        self.rng = random.Random(seed)
        self.edits = 0
        self.failure: str | None = None

    def run(self) -> None:
        while self.failure is None and not self.stop.wait(self.every):
            self.failure = self._add() if self.edits % 2 == 0 else self._remove()
            self.edits += 1

    def _add(self) -> str | None:
        batch = self.root / "added" / str(self.edits)
        batch.mkdir(parents=True)
        for i in range(2):
            colour = tuple(self.rng.randrange(256) for _ in range(3))
            Image.new("RGB", (40, 40), colour).save(batch / f"{i}.png")
        done = self._index("add", "--images", str(batch))
        match = re.search(r"ids (\d+)\.\.(\d+)", done.stdout)
        if done.returncode != 0 or match is None:
            return f"index add failed: {done.stderr[-300:]}"
        with self.ids.lock:
            self.ids.live.update(range(int(match.group(1)), int(match.group(2)) + 1))
        return None

    def _remove(self) -> str | None:
        with self.ids.lock:
            chosen = self.rng.sample(sorted(self.ids.live), 2)
        done = self._index("remove", "--ids", *map(str, chosen))
        if done.returncode != 0:
            return f"index remove failed: {done.stderr[-300:]}"
        with self.ids.lock:
            self.ids.live.difference_update(chosen)
            self.ids.removed.update(chosen)
        return None

    def _index(self, action: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "retrieval.cli.main", "index", action, "--index", str(self.index_dir), *args]
        return subprocess.run(command, capture_output=True, text=True)


def _lost_updates(url: str, index_dir: Path, ids: Ids) -> list[str]:
    """What the edits did that the disk or the server does not show, once the server has had time to reload."""
    from retrieval.index import SearchIndex

    lost = []
    on_disk = set(SearchIndex.load(index_dir).ids.tolist())
    if on_disk != ids.live:
        lost.append(f"on disk: missing {sorted(ids.live - on_disk)}, not removed {sorted(on_disk - ids.live)}")
    deadline = time.monotonic() + _SETTLE_S
    with httpx.Client(base_url=url, timeout=60) as client:
        while client.get("/healthz").json()["vectors"] != len(ids.live) and time.monotonic() < deadline:
            time.sleep(0.5)
        missing = [i for i in sorted(ids.live) if client.get(f"/items/{i}").status_code != 200]
        kept = [i for i in sorted(ids.removed) if client.get(f"/items/{i}").status_code != 404]
    if missing or kept:
        lost.append(f"served: missing {missing}, not removed {kept}")
    return lost


class _MemoryLog(threading.Thread):
    """The server's resident memory once a second, from /proc (no psutil)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self._stop_event.wait(1.0):
            status = _proc_status(self.pid)
            self.samples.append((time.monotonic() - started, status["VmRSS"]))
            self.peak = status["VmHWM"]

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _proc_status(pid: int) -> dict[str, int]:
    """`VmRSS` and `VmHWM` of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    return values


def _report(ledger: Ledger, memory: _MemoryLog, lost: list[str], elapsed: float, edits: int) -> int:
    every = [t for times in ledger.latencies.values() for t in times]
    total = len(every)
    server_errors = sum(count for status, count in ledger.statuses.items() if status >= 500 and status != 503)
    print(f"soak: {elapsed / 60:.1f} min, {total} requests ({total / elapsed:.0f}/s), {edits} index edits")
    print("answers by status: " + ", ".join(f"{status}: {count}" for status, count in sorted(ledger.statuses.items())))
    print(f"{'request':<16}{'count':>8}{'p50 ms':>10}{'p99 ms':>10}")
    for kind, times in sorted(ledger.latencies.items(), key=lambda item: -len(item[1])):
        ms = np.asarray(times) * 1000
        print(f"{kind:<16}{len(ms):>8}{np.percentile(ms, 50):>10.1f}{np.percentile(ms, 99):>10.1f}")
    ms = np.asarray(every) * 1000
    print(f"{'all':<16}{total:>8}{np.percentile(ms, 50):>10.1f}{np.percentile(ms, 99):>10.1f}")
    rss = memory.samples
    warm = [value for seconds, value in rss if seconds >= _WARM_UP * elapsed] or [rss[-1][1]]
    print(
        f"server memory: peak {memory.peak / 2**20:.0f} MiB; after warm-up {warm[0] / 2**20:.0f} MiB, "
        f"highest since {max(warm) / 2**20:.0f} MiB, at the end {warm[-1] / 2**20:.0f} MiB"
    )
    print(f"5xx (other than 503 busy): {server_errors}; lost updates: {len(lost)}")
    for line in [*ledger.unexpected, *lost]:
        print(f"  {line}")
    print(
        json.dumps({"requests": total, "statuses": dict(ledger.statuses), "lost": lost, "server_errors": server_errors})
    )
    return 1 if server_errors or lost or ledger.unexpected else 0


if __name__ == "__main__":
    main()
