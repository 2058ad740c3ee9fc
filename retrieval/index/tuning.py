"""Measuring and tuning an index against exact search: recall, latency, and the cheapest parameters.

Recall here is k-recall@k ("10-recall@10"): the fraction of a query's k exact nearest neighbours
that the index returns in its top k, averaged over queries. Exact neighbours come from
`faiss.IndexFlatIP` over the same vectors. Ties count as equal: a returned item whose score is at
least the k-th exact neighbour's, within float32 rounding (`tie_tolerance`), is a true neighbour
too, since exact search could have returned it in that one's place (ann-benchmarks counts
returned items against the k-th true distance in the same way). Without it, the recall of
vectors with exact duplicates, or of a collapsed model whose vectors are all equal, would measure
which of the tied ids FAISS happens to keep: an exact index would score below 1. Every kind
returns scores computed from the full vectors (HNSW and IVF store them, IVF-PQ re-ranks with
them), which is what makes its scores comparable with the exact ones.

Tuning explores the index's search parameters (`nprobe`, `efSearch`, `k_factor_rf`) with FAISS's
own `ParameterSpace` and `OperatingPoints` (Pareto-optimal recall against cost), scores each with
the same `recall_at_k` that `measure` reports, and takes the cheapest point that reaches the target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import faiss
import numpy as np

from retrieval.errors import UserError

__all__ = [
    "MIN_SELF_RECALL",
    "TUNED_K",
    "TUNING_QUERIES",
    "Measurement",
    "apply_search_parameters",
    "exact_neighbors",
    "find_index",
    "label_space",
    "measure",
    "recall_at_k",
    "exact_search",
    "search_parameter_ranges",
    "set_search_parameters",
    "tie_tolerance",
    "tune_search_parameters",
]

MIN_SELF_RECALL = 0.999  # share of stored vectors that must find themselves first under tuned parameters
TUNED_K = 10  # search parameters are tuned and measured for 10-recall@10
TUNING_QUERIES = 1000  # queries sampled from the stored or build vectors when none are given
_LATENCY_QUERIES = 1000  # single-query timings per measurement: enough for a stable p99

IndexT = TypeVar("IndexT", bound=faiss.Index)


@dataclass(frozen=True)
class Measurement:
    """How an index performs on a query set, with the settings that reproduce it."""

    recall_at_k: float | None  # k-recall@k against exact search; None when no query has a true neighbour
    k: int
    neighbors: int  # true neighbours a query counts: k, or fewer when the index holds fewer candidates
    queries: int
    p50_ms: float  # single query, one thread
    p99_ms: float
    batch_qps: float  # all queries in one call, `batch_threads` threads
    batch_threads: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "recall_at_k": None if self.recall_at_k is None else round(self.recall_at_k, 4),
            "k": self.k,
            "neighbors": self.neighbors,
            "queries": self.queries,
            "p50_ms": round(self.p50_ms, 4),
            "p99_ms": round(self.p99_ms, 4),
            "batch_qps": round(self.batch_qps, 1),
            "batch_threads": self.batch_threads,
        }


def exact_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`(Q, k)` scores and row positions in `vectors` `(N, D)` of each query's exact top-k by inner product."""
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    return flat.search(queries, min(k, len(vectors)))


def exact_neighbors(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """`(Q, k)` row positions in `vectors` `(N, D)` of each query's exact top-k by inner product."""
    return exact_search(vectors, queries, k)[1]


def tie_tolerance(dim: int) -> float:
    """How far two computations of one inner product of D-dim unit vectors can differ in float32.

    Each sums D rounded products: at most about D float32 epsilons apart between two summation
    orders (FAISS's BLAS search and its per-vector SIMD kernels); twice that, to be safe. A score
    within it of another is equal to it as far as the arithmetic can tell.
    """
    return 2.0 * dim * float(np.finfo(np.float32).eps)


def recall_at_k(
    found: np.ndarray,
    truth: np.ndarray,
    k: int,
    found_scores: np.ndarray | None = None,
    truth_scores: np.ndarray | None = None,
    tolerance: float = 0.0,
) -> float:
    """k-recall@k: the found ids among each row's true ids, summed over rows, over the number of true ids.

    Ids -1 never count, and a `truth` of fewer than k ids a row (an index holding fewer than k
    candidates) counts only the ids it has: finding all of them is 1.0, not their share of k.
    With `found_scores` and `truth_scores` (the scores beside the ids), a found id also counts when
    its score reaches the row's k-th true score less `tolerance`: it ties with a true neighbour.
    A row never counts more hits than it has true ids.

    Raises:
        ValueError: `truth` holds no id at all (nothing to recall).
    """
    found, truth = found[:, :k], truth[:, :k]
    expected = (truth >= 0).sum(axis=1)
    if int(expected.sum()) == 0:
        raise ValueError("truth holds no neighbour ids: there is nothing to recall")
    hits = ((found[:, :, None] == truth[:, None, :]) & (found[:, :, None] >= 0)).any(axis=2)
    if found_scores is not None and truth_scores is not None:
        kth = np.min(np.where(truth >= 0, truth_scores[:, :k], np.inf), axis=1, initial=np.inf)
        hits |= (found >= 0) & (found_scores[:, :k] >= kth[:, None] - tolerance)
    return float(np.minimum(hits.sum(axis=1), expected).sum() / expected.sum())


def measure(
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
    queries: np.ndarray,
    true_ids: np.ndarray,
    k: int,
    true_scores: np.ndarray | None = None,
) -> Measurement:
    """Recall of `search(queries, k)` against `true_ids` `(Q, <=k)`, then its single-query latency and batch QPS.

    `true_ids` may hold fewer than k ids a row (-1 or a narrower array) where fewer candidates
    exist; recall then counts those (`Measurement.neighbors`), and is None when there are none.
    With `true_scores` (their exact scores), ties count as equal (`recall_at_k`).

    Latency is timed query by query on one FAISS thread (what one request of a server costs),
    over up to 1,000 queries; batch QPS runs all queries in one call on every thread.
    """
    threads = faiss.omp_get_max_threads()
    started = time.perf_counter()
    scores, found = search(queries, k)
    batch_seconds = time.perf_counter() - started
    faiss.omp_set_num_threads(1)
    try:
        timings = []
        for row in range(min(len(queries), _LATENCY_QUERIES)):
            started = time.perf_counter()
            search(queries[row : row + 1], k)
            timings.append(time.perf_counter() - started)
    finally:
        faiss.omp_set_num_threads(threads)
    milliseconds = 1000.0 * np.asarray(timings)
    neighbors = int((true_ids[:, :k] >= 0).sum(axis=1).max(initial=0))
    return Measurement(
        recall_at_k=_recall(found, scores, true_ids, true_scores, k, queries.shape[1]) if neighbors else None,
        k=k,
        neighbors=neighbors,
        queries=len(queries),
        p50_ms=float(np.percentile(milliseconds, 50)),
        p99_ms=float(np.percentile(milliseconds, 99)),
        batch_qps=len(queries) / max(batch_seconds, 1e-9),
        batch_threads=threads,
    )


def search_parameter_ranges(index: faiss.Index) -> dict[str, list[int]]:
    """The values tuning explores for `index` (the index under any `IDMap2`): powers of two, bounded.

    `nprobe` up to min(nlist, 1024), `efSearch` 16..2048, `k_factor_rf` 1..64; FAISS's default
    ranges go up to nprobe = nlist, which on a large index costs minutes of exploring.
    """
    ranges: dict[str, list[int]] = {}
    ivf = find_index(index, faiss.IndexIVF)
    if ivf is not None:
        ranges["nprobe"] = [2**p for p in range(11) if 2**p <= ivf.nlist] or [1]
    if find_index(index, faiss.IndexHNSW) is not None:
        ranges["efSearch"] = [2**p for p in range(4, 12)]
    if find_index(index, faiss.IndexRefine) is not None:
        ranges["k_factor_rf"] = [2**p for p in range(7)]
    return ranges


def tune_search_parameters(
    index: faiss.Index,
    queries: np.ndarray,
    true_labels: np.ndarray,
    target_recall: float,
    k: int = 10,
    stored: tuple[np.ndarray, np.ndarray] | None = None,
    best_effort: bool = False,
    true_scores: np.ndarray | None = None,
) -> tuple[dict[str, int], float]:
    """The cheapest search parameters of `index` whose k-recall@k on `queries` reaches `target_recall`.

    Each setting from `search_parameter_ranges` is applied with FAISS's `ParameterSpace`, scored
    with `recall_at_k` (k-recall@k, ties counted as equal with `true_scores`: the recall `measure`
    reports, so the recall tuning claims is the one measured) and entered into FAISS's
    `OperatingPoints` (recall against cost); the answer is the cheapest Pareto-optimal point at or above the target. The
    cost is the bytes a query reads (`_bytes_read`), not a timing: timings of sub-millisecond
    searches on a busy machine are noise, and reordering them would make "cheapest" random. The
    first parameter (nprobe or efSearch) is raised only until the target is met, for each value
    of the second (k_factor_rf), since recall grows with it.

    With `stored`, a setting must also let stored vectors find themselves first (at least
    `MIN_SELF_RECALL` of them; an exact duplicate tied with it in first place counts as itself):
    "more like this" on an item that cannot find itself is broken, and a graph index tuned on
    held-out queries alone can fall short of it.

    Args:
        index: the searchable index (without `IDMap2`: labels must be comparable to `true_labels`).
        queries: `(Q, D)` held-out queries.
        true_labels: `(Q, k)` labels of their exact top-k in `index`'s label space.
        target_recall: in (0, 1].
        k: the k of k-recall@k.
        stored: `(vectors (S, D), labels (S,))` of a sample of stored vectors and their labels.
        best_effort: when no setting reaches the target, take the most accurate one explored (preferring
            those whose stored vectors find themselves) instead of raising: for a default target nobody asked for.
        true_scores: `(Q, k)` exact scores of `true_labels`; None counts ids only.

    Returns:
        `(parameters, recall)`: e.g. `{"nprobe": 32}` (empty for exact indexes) and the recall they reach.
        `index` is left set to these parameters.

    Raises:
        UserError: the target is out of (0, 1], or no explored setting reaches it (unless `best_effort`).
    """
    if not 0.0 < target_recall <= 1.0:
        raise UserError(f"target recall must be in (0, 1], got {target_recall}")
    ranges = search_parameter_ranges(index)
    if not ranges:
        return {}, 1.0
    points, finds_itself = faiss.OperatingPoints(), {}
    (first, first_values), *rest = ranges.items()
    for second in rest[0][1] if rest else [None]:
        for value in first_values:
            setting = {first: value} if second is None else {first: value, rest[0][0]: second}
            key = ",".join(f"{name}={number}" for name, number in setting.items())
            apply_search_parameters(index, key)
            distances, labels = index.search(queries, k)
            recall = _recall(labels, distances, true_labels, true_scores, k, queries.shape[1])
            points.add(recall, _bytes_read(index, setting, k), key)
            finds_itself[key] = stored is None or _self_recall(index, *stored, k) >= MIN_SELF_RECALL
            if recall >= target_recall and finds_itself[key]:
                break
    explored = [points.all_pts.at(i) for i in range(points.all_pts.size())]
    reached = [point for point in explored if point.perf >= target_recall and finds_itself[point.key]]
    if not reached and best_effort:
        best = max(explored, key=lambda point: (finds_itself[point.key], point.perf, -point.t))
        reached = [best]
    if not reached:
        best = max(explored, key=lambda point: point.perf)
        raise UserError(
            f"no search setting reaches recall@{k} {target_recall} with {MIN_SELF_RECALL:.1%} of stored vectors "
            f"finding themselves (best recall {best.perf:.4f} with {best.key}); lower --target-recall, "
            "or use a more exact kind (hnsw, ivf, flat), more nlist or larger pq_bytes"
        )
    cheapest = min(reached, key=lambda point: point.t)
    apply_search_parameters(index, cheapest.key)
    parameters = {name: int(value) for name, value in (item.split("=") for item in cheapest.key.split(","))}
    return parameters, float(cheapest.perf)


def _recall(
    found: np.ndarray, scores: np.ndarray, truth: np.ndarray, true_scores: np.ndarray | None, k: int, dim: int
) -> float:
    """`recall_at_k` with ties counted as equal when the true scores are known."""
    return recall_at_k(found, truth, k, scores, true_scores, tie_tolerance(dim))


def _self_recall(index: faiss.Index, vectors: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Share of `vectors` whose own label comes first in a k-nearest search, or a vector tied with it there."""
    scores, found = index.search(vectors, k)
    own_scores = np.einsum("ij,ij->i", vectors, vectors)
    tied = scores[:, 0] >= own_scores - tie_tolerance(vectors.shape[1])
    return float(np.mean((found[:, 0] == labels) | tied))


def _bytes_read(index: faiss.Index, setting: dict[str, int], k: int) -> float:
    """Bytes one query reads under `setting`: the cost model that ranks operating points.

    nprobe lists of ntotal/nlist codes each, plus k·k_factor_rf full vectors to re-rank; an HNSW
    search visits about efSearch nodes (only its order matters: it is tuned alone).
    """
    cost = 0.0
    ivf = find_index(index, faiss.IndexIVF)
    if "nprobe" in setting and ivf is not None:
        cost += setting["nprobe"] * ivf.ntotal / ivf.nlist * ivf.code_size
    if "k_factor_rf" in setting:
        cost += k * setting["k_factor_rf"] * 4 * index.d
    if "efSearch" in setting:
        cost += setting["efSearch"] * 4 * index.d
    return cost


def apply_search_parameters(index: faiss.Index, setting: str) -> None:
    """Set `index`'s search parameters from a string such as `"nprobe=32,k_factor_rf=4"` (FAISS's `ParameterSpace`)."""
    # The stub declares the (index, int) and (index, str) variants without @overload, so only the int one is seen.
    faiss.ParameterSpace().set_index_parameters(index, setting)  # type: ignore[arg-type]


def set_search_parameters(index: faiss.Index, parameters: Mapping[str, int]) -> None:
    """Set `parameters` (`{"nprobe": 32}`) on `index`, or on the index an `IndexIDMap2` wraps; none: nothing."""
    if parameters:
        target = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
        apply_search_parameters(target, ",".join(f"{k}={v}" for k, v in parameters.items()))


def label_space(index: faiss.Index) -> tuple[faiss.Index, Callable[[np.ndarray], Any]]:
    """The index FAISS's `ParameterSpace` can tune, and a map from ids to its labels.

    `ParameterSpace` does not look through `IndexIDMap2`, so tuning runs on the wrapped index,
    whose labels are insertion positions.
    """
    if isinstance(index, faiss.IndexIDMap2):
        id_map = faiss.vector_to_array(index.id_map)
        order = np.argsort(id_map)
        return faiss.downcast_index(index.index), lambda ids: order[np.searchsorted(id_map, ids, sorter=order)]
    return index, lambda ids: ids


def find_index(index: faiss.Index, kind: type[IndexT]) -> IndexT | None:
    """The first index of type `kind` in the chain under `index` (IDMap, pre-transform, refine), downcast."""
    current: faiss.Index | None = faiss.downcast_index(index)
    while current is not None:
        if isinstance(current, kind):
            return current
        for attribute in ("index", "base_index"):
            if hasattr(current, attribute):
                current = faiss.downcast_index(getattr(current, attribute))
                break
        else:
            return None
    return None
