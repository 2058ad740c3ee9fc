"""Benchmark `retrieval.index.SearchIndex` on clustered 128-d unit vectors: every kind, and `auto`.

For each N, draws N + Q vectors from `clustered_unit_vectors` (N / 1,000 classes, a trained
embedder's shape: tight classes, anisotropic spread); the last Q are held-out queries, never
stored. Per kind it builds the index tuned to `--target-recall` on those queries, then reports:

- build time (training, adding, exact ground truth, tuning, measuring: the whole `build` call);
- bytes/vector: the saved `index.faiss` size over N; for ivfpq also the part that stays resident
  when loaded with `mmap=True` (the file minus the 4·D bytes a vector of re-ranking vectors);
- p50 / p99 latency of one query on one thread, batch QPS (all Q queries in one call, all threads),
  10-recall@10 against exact search, all from `SearchIndex.evaluate(queries)`;
- self@1: the share of stored vectors (a random sample of `--self-sample`) whose own id comes first;
- open: seconds to `SearchIndex.load` the saved index (checksums included) and to open its
  1-row-per-vector metadata file (path, label) memory-mapped.

The exact-search row (flat) is the baseline that the others' recall and latency are read against.

Usage: nice -n 5 python tools/bench_index.py [--sizes 100000,1000000] [--kinds flat,hnsw,ivf,ivfpq,auto]
       [--queries 1000] [--target-recall 0.95] [--auto-bytes-per-vector 48]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

from retrieval.index import SearchIndex, choose_index, clustered_unit_vectors
from retrieval.index.metadata import Metadata
from retrieval.index.storage import INDEX_FILE, METADATA_FILE

DIM = 128


def bench_one(
    label: str, vectors: np.ndarray, queries: np.ndarray, kind: str, max_memory: int | None, args: argparse.Namespace
) -> dict[str, object]:
    n = len(vectors)
    metadata = {"path": [f"images/{i:07d}.jpg" for i in range(n)], "label": np.arange(n) % max(n // 1000, 1)}
    exact = kind == "flat"
    started = time.perf_counter()
    index = SearchIndex.build(
        vectors,
        metadata,
        kind=kind,
        max_memory=max_memory,
        target_recall=None if exact else args.target_recall,
        tuning_queries=queries,
        progress=False,
    )
    build_seconds = time.perf_counter() - started
    result = index.evaluate(queries, k=10)
    rng = np.random.default_rng(1)
    sample = np.sort(rng.choice(n, size=min(args.self_sample, n), replace=False))
    _, first = index.search(vectors[sample], 1)
    self_first = float(np.mean(first[:, 0] == sample))
    with tempfile.TemporaryDirectory(dir=args.work_dir) as directory:
        index.save(directory)
        file_bytes = (Path(directory) / INDEX_FILE).stat().st_size
        started = time.perf_counter()
        SearchIndex.load(directory, mmap=True)
        load_seconds = time.perf_counter() - started
        started = time.perf_counter()
        Metadata.read(Path(directory) / METADATA_FILE)
        metadata_seconds = time.perf_counter() - started
    per_vector = file_bytes / n
    resident = per_vector - 4 * DIM if index.kind == "ivfpq" else per_vector
    return {
        "N": f"{n:,}",
        "kind": label if label == index.kind else f"{label} → {index.kind}",
        "params": ",".join(f"{k}={v}" for k, v in index.manifest.search_parameters.items()) or "exact",
        "build s": f"{build_seconds:.1f}",
        "bytes/vec": f"{per_vector:.0f}" + (f" ({resident:.0f} resident, mmap)" if resident != per_vector else ""),
        "p50 ms": f"{result.p50_ms:.3f}",
        "p99 ms": f"{result.p99_ms:.3f}",
        "QPS": f"{result.batch_qps:,.0f}",
        "recall@10": f"{result.recall_at_k:.4f}",
        "self@1": f"{self_first:.4f}",
        "load s": f"{load_seconds:.2f}",
        "metadata open s": f"{metadata_seconds:.3f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated N")
    parser.add_argument("--kinds", default="flat,hnsw,ivf,ivfpq,auto", help="comma-separated kinds")
    parser.add_argument("--queries", type=int, default=1000, help="held-out queries per N")
    parser.add_argument("--target-recall", type=float, default=0.95, help="10-recall@10 the approximate kinds tune to")
    parser.add_argument(
        "--auto-bytes-per-vector", type=float, default=48.0, help="also run auto with a budget of this many bytes x N"
    )
    parser.add_argument("--self-sample", type=int, default=100_000, help="stored vectors queried for self@1")
    parser.add_argument("--work-dir", default=None, help="where the saved indexes go (temporary)")
    args = parser.parse_args()
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads for batch search, 1 for latency\n")
    rows = []
    for n in (int(size) for size in args.sizes.split(",")):
        data, _ = clustered_unit_vectors(n + args.queries, DIM, n_clusters=max(n // 1000, 10), seed=0)
        vectors, queries = data[:n], data[n:]
        built: dict[str, dict[str, object]] = {}
        for kind in args.kinds.split(","):
            budgets = [None, int(args.auto_bytes_per_vector * n)] if kind == "auto" else [None]
            for budget in budgets:
                label = kind if budget is None else f"auto ≤{args.auto_bytes_per_vector:.0f} B/vec"
                chosen = choose_index(n, DIM, budget).kind.value if kind == "auto" else kind
                if kind == "auto" and chosen in built:  # same plan as that row: the build is deterministic
                    rows.append({**built[chosen], "kind": f"{label} → {chosen} (row above)"})
                    continue
                row = bench_one(label, vectors, queries, kind, budget, args)
                built[chosen] = row
                rows.append(row)
                print(" | ".join(str(value) for value in row.values()), flush=True)
    header = list(rows[0])
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[column]) for column in header) + " |")


if __name__ == "__main__":
    main()
