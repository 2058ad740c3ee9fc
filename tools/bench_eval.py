"""Benchmark `retrieval.metrics.retrieval_metrics` against its two natural baselines.

On N x 128 clustered, L2-normalized float32 embeddings (N = 60,000 by default, every item
querying all the others), it times, best of a few interleaved runs in the same process:

- `retrieval_metrics` (Recall@K, MAP@R, R-precision), including its input checks;
- pytorch-metric-learning's `AccuracyCalculator(k="max_bin_count")` computing the same metrics
  (precision_at_1, mean_average_precision_at_r, r_precision); target ratio <= 1.0x;
- one bare exact FAISS search (`IndexFlatIP`, all N queries, the k that `retrieval_metrics` needs:
  max(max(ks), largest R) + 1 for the query itself), the floor of any exact evaluation;
  target ratio <= 1.3x.

Two class structures: SOP-like (about N / 5.3 classes of 2 to 12 images) and 100 large classes
of N / 100 images, where R runs into the hundreds.

Usage: .venv/bin/python tools/bench_eval.py [--n 60000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import faiss
import numpy as np
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from retrieval.metrics import retrieval_metrics

KS = (1, 2, 4, 8)
DIM = 128


def clustered_embeddings(class_sizes: np.ndarray, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(N, DIM) L2-normalized float32 embeddings scattered around one random center per class, labels (N,)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(class_sizes)), class_sizes)
    centers = rng.standard_normal((len(class_sizes), DIM), dtype=np.float32)
    embeddings = centers[labels] + rng.standard_normal((len(labels), DIM), dtype=np.float32) * noise
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    order = rng.permutation(len(labels))
    return np.ascontiguousarray(embeddings[order]), labels[order]


def sop_like_class_sizes(num_items: int, seed: int = 0) -> np.ndarray:
    """Class sizes of 2 to 12 (mean ~5.3, like Stanford Online Products) adding up to `num_items`."""
    sizes = np.clip(2 + np.random.default_rng(seed).poisson(3.3, num_items), 2, 12)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), num_items)]
    remainder = num_items - sizes.sum()
    if remainder >= 2:
        return np.append(sizes, remainder)
    sizes[np.argmin(sizes)] += remainder
    return sizes


def best_times(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Shortest wall time in seconds of each contender over `repeats` rounds.

    Rounds call every contender in turn, so a burst of load from elsewhere on the machine
    slows all of them rather than one.
    """
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, function in contenders.items():
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return {name: min(runs) for name, runs in times.items()}


def pml_metrics(embeddings: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """AccuracyCalculator's values for the closed-set protocol (every item queries the others)."""
    calculator = AccuracyCalculator(
        include=("precision_at_1", "mean_average_precision_at_r", "r_precision"),
        k="max_bin_count",
        device=torch.device("cpu"),
    )
    return calculator.get_accuracy(embeddings, labels)


def bare_search(embeddings: np.ndarray, k: int) -> None:
    """One exact inner-product search of every row against all rows."""
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(embeddings)
    index.search(embeddings, k)


def run_case(name: str, class_sizes: np.ndarray, noise: float, repeats: int) -> None:
    """Time the three contenders on one class structure and print times and ratios."""
    embeddings, labels = clustered_embeddings(class_sizes, noise)
    k = max(max(KS), int(class_sizes.max()) - 1) + 1
    print(f"\n{name}: {len(labels):,} x {DIM}, {len(class_sizes):,} classes of {class_sizes.min()}-{class_sizes.max()}")
    ours = retrieval_metrics(embeddings, labels, KS)
    theirs = pml_metrics(embeddings, labels)
    print(
        f"  retrieval_metrics:  R@1 {ours['recall@1']:.4f}  MAP@R {ours['map@r']:.4f}  RP {ours['r_precision']:.4f}\n"
        f"  AccuracyCalculator: P@1 {theirs['precision_at_1']:.4f}  MAP@R {theirs['mean_average_precision_at_r']:.4f}"
        f"  RP {theirs['r_precision']:.4f}"
    )
    seconds = best_times(
        {
            "retrieval_metrics": lambda: retrieval_metrics(embeddings, labels, KS),
            "AccuracyCalculator": lambda: pml_metrics(embeddings, labels),
            f"FAISS k={k}": lambda: bare_search(embeddings, k),
        },
        repeats,
    )
    print(f"  best of {repeats}: " + ", ".join(f"{name} {value:.2f}s" for name, value in seconds.items()))
    ours_s, pml_s, faiss_s = seconds.values()
    print(f"  ratio to AccuracyCalculator: {ours_s / pml_s:.2f}x (target <= 1.0x)")
    print(f"  ratio to bare FAISS search:  {ours_s / faiss_s:.2f}x (target <= 1.3x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_000, help="number of embeddings (default: 60,000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per contender; the best is kept")
    args = parser.parse_args()
    print(f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads")
    run_case("SOP-like", sop_like_class_sizes(args.n), noise=1.45, repeats=args.repeats)
    run_case("100 large classes", np.full(100, args.n // 100), noise=1.9, repeats=args.repeats)


if __name__ == "__main__":
    main()
