"""The cost curve of an index built from embedding files: 1M, 3M, 10M clustered 128-d unit vectors.

For each N, writes N clustered unit vectors (`clustered_unit_vectors`, N / 1,000 classes, the
shape of a trained embedder's output) to `WORKDIR/vectors-N.npy` in 65,536-row chunks, and 1,000
more from the same classes to `queries-N.npy` (held out: never stored). Then, per index kind,
two child processes, so that each one's peak memory is its own:

- build: `SearchIndex.build_streamed` over the `.npy` exactly as `retrieval index build
  --embeddings` reads it (plain file reads, one chunk in memory), tuned to `--target-recall`
  10-recall@10 on the 1,000 queries against exact search (streamed FAISS flat search), then saved.
  Reports build seconds (sampling, training, adding, ground truth, tuning) and CPU seconds, save
  seconds, peak RSS (`getrusage`: mapped file pages count, e.g. on-disk lists being written),
  peak anonymous memory (RssAnon sampled every 0.2 s: what the build itself holds), and the
  recall and single-query p50/p99 measured on the built index;
- serve: `SearchIndex.load(mmap=True)` as `retrieval serve` opens it, then the 1,000 queries one
  at a time on one thread: p50/p99 and the memory the index adds to the process per vector:
  resident (VmRSS after the queries minus before loading: mapped file pages the queries touched
  count, though the kernel can drop them) and anonymous (RssAnon: what it cannot drop).

A kind named `ivf-on-disk` is `ivf` built with `on_disk` (`index build --on-disk`): inverted
lists in shards merged into one memory-mapped file. Every build gets a working directory as
`index build --embeddings` does, so `ivfpq` writes its re-ranking vectors to `refine.faiss` as
they stream and keeps only the PQ codes and ids in memory.

Bytes per vector on disk: the index directory's files over N. Every child runs on `--threads`
FAISS threads. The `.npy` files are deleted at the end unless `--keep`.

Usage: nice -n 10 python tools/bench_scale.py --sizes 1M,3M --kinds hnsw,ivf,ivfpq [--threads 2]
       [--workdir /tmp/bench_scale] [--target-recall 0.95] [--json results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

DIM = 128
QUERIES = 1000
_SUFFIXES = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,3M", help="comma-separated N, e.g. 1M,3M,10M")
    parser.add_argument("--kinds", default="hnsw,ivf,ivfpq", help="comma-separated index kinds")
    parser.add_argument("--threads", type=int, default=2, help="FAISS threads of each child")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_scale"))
    parser.add_argument("--target-recall", type=float, default=0.95)
    parser.add_argument("--json", type=Path, help="append one JSON line per measured index")
    parser.add_argument("--keep", action="store_true", help="keep the vector files and indexes")
    parser.add_argument("--child", choices=["build", "serve"], help=argparse.SUPPRESS)
    parser.add_argument("--index", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--vectors", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_build(args) if args.child == "build" else _serve(args)))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(
        "| N | kind | factory, search parameters | build s | peak RSS (anon) GB | disk B/vec | resident (anon) B/vec "
        "| recall@10 | p50 ms | p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in map(_count, args.sizes.split(",")):
        vectors = _write_vectors(args.workdir, n)
        for kind in args.kinds.split(","):
            row = _bench(args, vectors, kind)
            print(_table_row(row), flush=True)
            if args.json:
                with args.json.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
            if not args.keep:
                shutil.rmtree(row["index"], ignore_errors=True)
        if not args.keep:
            vectors.unlink()
            vectors.with_name(f"queries-{n}.npy").unlink()


def _count(text: str) -> int:
    text = text.strip().lower()
    return int(float(text[:-1]) * _SUFFIXES[text[-1]]) if text[-1] in _SUFFIXES else int(text)


def _write_vectors(workdir: Path, n: int) -> Path:
    """`vectors-N.npy` (N rows) and `queries-N.npy` (1,000 rows) from the same classes, written in chunks."""
    from retrieval.index import clustered_unit_vectors

    path, queries = workdir / f"vectors-{n}.npy", workdir / f"queries-{n}.npy"
    if not path.exists():
        both = np.lib.format.open_memmap(
            workdir / f".all-{n}.npy", mode="w+", dtype=np.float32, shape=(n + QUERIES, DIM)
        )
        clustered_unit_vectors(n + QUERIES, DIM, n_clusters=max(n // 1000, 1), seed=0, out=both)
        np.save(queries, np.asarray(both[n:]))
        stored = np.lib.format.open_memmap(path.with_suffix(".tmp"), mode="w+", dtype=np.float32, shape=(n, DIM))
        for start in range(0, n, 1 << 20):
            stored[start : start + (1 << 20)] = both[start : min(start + (1 << 20), n)]
        stored.flush()
        del stored, both
        path.with_suffix(".tmp").rename(path)
        (workdir / f".all-{n}.npy").unlink()
    return path


def _bench(args: argparse.Namespace, vectors: Path, kind: str) -> dict[str, Any]:
    n = int(np.load(vectors, mmap_mode="r").shape[0])
    index = args.workdir / f"index-{n}-{kind}"
    common = [sys.executable, __file__, "--threads", str(args.threads), "--index", str(index)]
    build = _child(
        [
            *common,
            "--child",
            "build",
            "--vectors",
            str(vectors),
            "--kind",
            kind,
            "--target-recall",
            str(args.target_recall),
        ]
    )
    serve = _child([*common, "--child", "serve", "--vectors", str(vectors)])
    disk = sum(path.stat().st_size for path in index.iterdir())
    return {"n": n, "kind": kind, "index": str(index), "disk_bytes_per_vector": disk / n, **build, **serve}


def _child(command: list[str]) -> dict[str, Any]:
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _build(args: argparse.Namespace) -> dict[str, Any]:
    import faiss

    from retrieval.index import SearchIndex
    from retrieval.index.from_embeddings import open_embedding_files

    faiss.omp_set_num_threads(args.threads)
    kind, on_disk = args.kind.removesuffix("-on-disk"), args.kind.endswith("-on-disk")
    work = args.index.with_name(args.index.name + ".work")
    work.mkdir()
    files = open_embedding_files([args.vectors])
    queries = np.load(args.vectors.with_name(args.vectors.name.replace("vectors-", "queries-")))
    peak_anonymous = _PeakAnonymous()
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    index = SearchIndex.build_streamed(
        files.stream,
        kind=kind,
        target_recall=args.target_recall,
        tuning_queries=queries,
        progress=False,
        on_disk=work if on_disk else None,
        refine_directory=work,
    )
    built, cpu_seconds = time.perf_counter(), _cpu_seconds() - cpu_started
    index.save(args.index)
    shutil.rmtree(work, ignore_errors=True)
    measured = index.manifest.measured
    return {
        "factory": index.factory,
        "search_parameters": index.manifest.search_parameters,
        "build_seconds": round(built - started, 1),
        "build_cpu_seconds": round(cpu_seconds, 1),
        "save_seconds": round(time.perf_counter() - built, 1),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_anonymous_bytes": peak_anonymous.stop(),
        "recall_at_10": measured.recall_at_k,
        "build_p50_ms": measured.p50_ms,
        "build_p99_ms": measured.p99_ms,
    }


def _serve(args: argparse.Namespace) -> dict[str, Any]:
    import faiss

    from retrieval.index import SearchIndex

    queries = np.load(args.vectors.with_name(args.vectors.name.replace("vectors-", "queries-")))
    before, anonymous_before = _status_bytes("VmRSS"), _status_bytes("RssAnon")
    started = time.perf_counter()
    index = SearchIndex.load(args.index, mmap=True)
    opened = time.perf_counter() - started
    faiss.omp_set_num_threads(1)
    timings = []
    for _ in range(2):  # the first round pages the index in; the second is a server's steady state
        timings = []
        for row in range(len(queries)):
            started = time.perf_counter()
            index.search(queries[row : row + 1], 10)
            timings.append(1000 * (time.perf_counter() - started))
    return {
        "open_seconds": round(opened, 2),
        "p50_ms": round(float(np.percentile(timings, 50)), 3),
        "p99_ms": round(float(np.percentile(timings, 99)), 3),
        "resident_bytes_per_vector": round((_status_bytes("VmRSS") - before) / index.ntotal, 1),
        "anonymous_bytes_per_vector": round((_status_bytes("RssAnon") - anonymous_before) / index.ntotal, 1),
    }


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far: on a shared machine, the cost that wall time hides."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _PeakAnonymous:
    """The largest RssAnon of this process, sampled every 0.2 s by a thread (the kernel keeps a peak of VmRSS only)."""

    def __init__(self) -> None:
        self._peak, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.2):
            self._peak = max(self._peak, _status_bytes("RssAnon"))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return max(self._peak, _status_bytes("RssAnon"))


def _status_bytes(field: str) -> int:
    """A memory field of /proc/self/status in bytes: VmRSS (all resident pages, mapped files' included), RssAnon."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _table_row(row: dict[str, Any]) -> str:
    return (
        f"| {row['n']:,} | {row['kind']} | `{row['factory']}` {row['search_parameters']} | {row['build_seconds']:.0f} "
        f"| {row['peak_rss_bytes'] / 2**30:.2f} ({row.get('peak_anonymous_bytes', 0) / 2**30:.2f}) "
        f"| {row['disk_bytes_per_vector']:.0f} "
        f"| {row['resident_bytes_per_vector']:.0f} ({row['anonymous_bytes_per_vector']:.0f}) "
        f"| {row['recall_at_10']:.4f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} |"
    )


if __name__ == "__main__":
    main()
