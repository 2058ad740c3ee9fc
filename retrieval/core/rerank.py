"""Re-ranking a search's results: query expansion, database-side augmentation, k-reciprocal.

- `qe` (alpha-weighted average query expansion; Chum et al. 2007, Radenovic et al. 2018): the query is
  replaced by the normalized sum of itself and its k nearest results, each weighted by score**alpha,
  and searched again.
- `dba` (database-side augmentation, the same average over each database item's k nearest items,
  itself first): applied once to the stored vectors, at index build time or to an evaluation gallery.
- `kreciprocal` (Zhong et al., "Re-ranking Person Re-identification with k-reciprocal Encoding", CVPR
  2017): the Jaccard distance of k-reciprocal neighbour sets, blended with the original distance
  (`lam` of it). It is computed inside each query's `shortlist` nearest results (the query and those
  items are the whole graph), so a query costs O(shortlist**2 * D), whatever the gallery size; results
  past the shortlist keep their order.

Scores returned with re-ranked results stay the inner products with the original query, so a
score threshold means the same with and without re-ranking; only the order changes, and the scores of
a re-ranked list are not in descending order.

Re-ranking by a neighbourhood can demote the query's own image: `qe:k=10,alpha=0` searches with the
plain mean of the query and its 10 nearest results, which can sit nearer to 5 other items than to the
query itself. `evaluate --rerank` never sees that case (each query's own row is left out of the
gallery, as the protocol scores the retrieval of other items), so it can choose such parameters; `index
query` and `serve` search indexes that hold the query image. So `qe` and `kreciprocal` put every result
identical to the query (an inner product of at least `IDENTICAL_SCORE` with it: the same image embedded
twice differs by float rounding only) first, in the original order, and re-rank the rest; evaluation
applies the same rule, where it only moves duplicate images of a query to the front. `dba` cannot: it
stores each item as the average of its neighbours, so the image's own vector is no longer in the index
(with `alpha=0` and `k=2`, two mutual nearest neighbours store one and the same vector).

A spec string names a method and, optionally, its parameters: `qe`, `qe:k=2,alpha=3`, `dba:k=5`,
`kreciprocal:k1=20,k2=6,lam=0.3`. Everything here is numpy + FAISS (no torch), so `serve` can use it; FAISS loads
only when dba searches, so a spec is read (`retrieval.config`) before any heavy import.
The methods are the registry `RERANK_METHODS`: a new one is a frozen dataclass with `name`,
`grid_values`, `database`, `search` and `spec` (a `Reranker`, e.g. derived from `RerankMethod`) in one
module with `@RERANK_METHODS.register("name")`, or a `retrieval.rerankers` entry point (`docs/extending.md`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from retrieval.errors import UserError
from retrieval.registry import Registry

__all__ = [
    "IDENTICAL_SCORE",
    "RERANK_METHODS",
    "DatabaseAugmentation",
    "Gallery",
    "KReciprocal",
    "QueryExpansion",
    "RerankMethod",
    "Reranker",
    "augment_vectors",
    "augmentation_at_build",
    "stored_augmentation",
    "parse_rerank",
    "rerank_at_query",
]

IDENTICAL_SCORE = 0.9999  # a result at least this close to the query is its own image: it stays first
_BATCH = 256  # queries re-ranked at once by k-reciprocal: a few (B, n, n) float32 arrays
# Batched products of small matrices go through np.einsum, not np.matmul: matmul calls a threaded BLAS
# once per matrix, whose thread start-up dominates at n ~ 100 (docs/experiments/fashion_mnist.md, "Re-ranking").


class Gallery(Protocol):
    """What re-ranking needs from a searchable collection of unit vectors."""

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` scores and ids of each vector's k nearest items, best first; ids -1 past the end."""
        ...

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """`(*ids.shape, D)` float32 stored vectors of `ids` (any value for ids of -1)."""
        ...


class Reranker(Protocol):
    """A re-ranking method: a database transform and a search that may re-order results."""

    name: ClassVar[str]

    def database(self, vectors: np.ndarray) -> np.ndarray:
        """The vectors to store for `(N, D)` unit vectors (a copy or the same array)."""
        ...

    def search(self, gallery: Gallery, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """`(n, k)` scores (inner products with the query) and ids, in re-ranked order."""
        ...

    def spec(self) -> str:
        """The spec string that rebuilds this reranker (`parse_rerank(r.spec()) == r`)."""
        ...


class RerankMethod:
    """Shared by the methods (frozen dataclasses of their parameters): their spec string and parameter grid."""

    name: ClassVar[str]
    grid_values: ClassVar[dict[str, tuple[float, ...]]]

    def spec(self) -> str:
        values = ",".join(f"{f.name}={getattr(self, f.name):g}" for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return f"{self.name}:{values}"

    @classmethod
    def grid(cls) -> Iterator[RerankMethod]:
        """Every combination of `grid_values`: the candidates `evaluate --rerank` chooses from on validation."""
        names = list(cls.grid_values)
        for values in itertools.product(*cls.grid_values.values()):
            yield cls(**dict(zip(names, values, strict=True)))


@dataclass(frozen=True)
class QueryExpansion(RerankMethod):
    """alpha-QE: search again with the normalized, score**alpha-weighted sum of the query and its top k."""

    name: ClassVar[str] = "qe"
    grid_values: ClassVar[dict[str, tuple[float, ...]]] = {"k": (1, 2, 3, 5, 10), "alpha": (0.0, 1.0, 3.0)}
    k: int = 2
    alpha: float = 3.0

    def __post_init__(self) -> None:
        _check_positive(self, "k")

    def database(self, vectors: np.ndarray) -> np.ndarray:
        return vectors

    def search(self, gallery: Gallery, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        top_scores, top_ids = gallery.search(queries, max(self.k, k))
        width = min(self.k, top_ids.shape[1])
        neighbours = gallery.vectors(top_ids[:, :width])
        expanded = _weighted_sum(queries, top_scores[:, :width], neighbours, top_ids[:, :width], self.alpha)
        _, ids = gallery.search(expanded, k)
        ids = _identical_first(top_scores, top_ids, ids)
        return _scores_of(queries, gallery, ids), ids


@dataclass(frozen=True)
class DatabaseAugmentation(RerankMethod):
    """alpha-DBA: each stored vector becomes the normalized, score**alpha-weighted sum of its k nearest."""

    name: ClassVar[str] = "dba"
    grid_values: ClassVar[dict[str, tuple[float, ...]]] = {"k": (2, 3, 5, 10), "alpha": (0.0, 1.0, 3.0)}
    k: int = 2
    alpha: float = 3.0

    def __post_init__(self) -> None:
        _check_positive(self, "k")

    def database(self, vectors: np.ndarray) -> np.ndarray:
        return augment_vectors(vectors, self.k, self.alpha)

    def added(self, gallery: Gallery, vectors: np.ndarray) -> np.ndarray:
        """Vectors added to an augmented gallery: each summed with its k - 1 nearest stored items, as at build.

        The stored items keep their vectors (they would change too in a rebuild: `index build` again for that).
        """
        if self.k <= 1 or len(vectors) == 0:
            return np.ascontiguousarray(vectors, dtype=np.float32)
        scores, ids = gallery.search(vectors, self.k - 1)
        return _weighted_sum(vectors, scores, gallery.vectors(ids), ids, self.alpha)

    def search(self, gallery: Gallery, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return gallery.search(queries, k)


@dataclass(frozen=True)
class KReciprocal(RerankMethod):
    """k-reciprocal re-ranking inside each query's `shortlist` nearest results."""

    name: ClassVar[str] = "kreciprocal"
    grid_values: ClassVar[dict[str, tuple[float, ...]]] = {"k1": (10, 20), "k2": (3, 6), "lam": (0.1, 0.3, 0.6)}
    k1: int = 20
    k2: int = 6
    lam: float = 0.3
    shortlist: int = 100

    def __post_init__(self) -> None:
        for name in ("k1", "k2", "shortlist"):
            _check_positive(self, name)
        if not 0 <= self.lam <= 1:
            raise UserError(f"kreciprocal lam must lie in [0, 1], got {self.lam:g}")

    def database(self, vectors: np.ndarray) -> np.ndarray:
        return vectors

    def search(self, gallery: Gallery, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        found = gallery.search(queries, max(k, self.shortlist))
        scores, ids = (np.array(array) for array in found)  # writable copies, re-ordered in place
        width = min(self.shortlist, ids.shape[1])
        for start in range(0, len(queries), _BATCH):
            rows = slice(start, start + _BATCH)
            head = ids[rows, :width]
            points = np.concatenate([queries[rows, None, :], gallery.vectors(head)], axis=1)
            order = self._order(points, head >= 0)
            ids[rows, :width] = np.take_along_axis(head, order, axis=1)
            scores[rows, :width] = np.take_along_axis(scores[rows, :width], order, axis=1)
        # every result of the plain search is still in the list, with its own score: the identical ones go first
        first = np.argsort(~((scores >= IDENTICAL_SCORE) & (ids >= 0)), axis=1, kind="stable")
        return np.take_along_axis(scores, first, axis=1)[:, :k], np.take_along_axis(ids, first, axis=1)[:, :k]

    def _order(self, points: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """`(B, L)` new order of each query's L shortlisted items, from `(B, 1 + L, D)` query + items.

        Padding (ids -1, where fewer than L items exist or pass the filter) is left out of every neighbour
        set, so it weighs nothing and sorts last; a zero weight sum never divides (it made NaNs that sorted
        the padding first and dropped real items).
        """
        present = np.concatenate([np.ones((len(valid), 1), bool), valid], axis=1)
        pairs = present[:, :, None] & present[:, None, :]  # both ends real: the query or a stored item
        distances = np.maximum(2.0 - 2.0 * np.einsum("bid,bjd->bij", points, points), 0.0)
        distances[~pairs] = 4.0  # padding: as far as unit vectors can be
        ranks = np.argsort(distances, axis=2, kind="stable")
        reciprocal = _reciprocal(ranks, self.k1) & pairs
        half = _reciprocal(ranks, int(np.around(self.k1 / 2))) & pairs
        expanded = _expand(reciprocal, half)
        weights = np.exp(-distances) * expanded
        weights /= np.maximum(weights.sum(axis=2, keepdims=True), np.finfo(np.float32).tiny)
        if self.k2 > 1:
            local = (_nearest_mask(ranks, self.k2) & pairs).astype(np.float32)
            weights = np.einsum("bij,bjk->bik", local, weights) / np.maximum(local.sum(axis=2, keepdims=True), 1.0)
        query = weights[:, :1, :]
        shared = np.minimum(query, weights).sum(axis=2)
        jaccard = 1.0 - shared / np.maximum(query, weights).sum(axis=2)
        final = (1.0 - self.lam) * jaccard[:, 1:] + self.lam * distances[:, 0, 1:]
        final[~valid] = np.inf
        return np.argsort(final, axis=1, kind="stable")


def augmentation_at_build(spec: str) -> DatabaseAugmentation:
    """The database-side augmentation `spec` names, for `index build --rerank`: the query-time methods are refused.

    Raises:
        UserError: `spec` is not a valid spec, or names a query-time method.
    """
    reranker = parse_rerank(spec)
    if not isinstance(reranker, DatabaseAugmentation):
        raise UserError(f"{reranker.name} re-ranks queries, not the stored vectors: pass it to index query or serve")
    return reranker


def stored_augmentation(spec: str | None) -> DatabaseAugmentation | None:
    """The augmentation of vectors an index (or a re-ranker's `base`) records by its spec; None: plain vectors.

    Compared as values, not as text: `dba:k=5,alpha=0` and `dba:alpha=0.0,k=5` are one augmentation.
    """
    return None if spec is None else augmentation_at_build(spec)


def rerank_at_query(spec: str) -> Reranker:
    """The reranker `spec` names, for a search of a built index: `dba` belongs to the build, not the query.

    Raises:
        UserError: `spec` is not a valid spec, or names `dba`.
    """
    reranker = parse_rerank(spec)
    if isinstance(reranker, DatabaseAugmentation):
        raise UserError(
            "dba re-ranks the stored vectors, not a query: build the index with --rerank dba; at query time use qe or "
            "kreciprocal"
        )
    return reranker


RERANK_METHODS: Registry[type[RerankMethod]] = Registry(
    "re-ranking method",
    "retrieval.rerankers",
    {
        "qe": "retrieval.core.rerank:QueryExpansion",
        "dba": "retrieval.core.rerank:DatabaseAugmentation",
        "kreciprocal": "retrieval.core.rerank:KReciprocal",
    },
    accepts=lambda obj: isinstance(obj, type) and all(hasattr(obj, part) for part in ("grid", "search", "database")),
    expected="a re-ranking class (a dataclass with name, grid_values, database, search and spec)",
    unknown=lambda name, names: f"unknown re-ranking method {name!r}; choose one of {', '.join(names)}",
)


def parse_rerank(spec: str) -> Reranker:
    """The reranker a spec string names: `qe`, `qe:k=2,alpha=3`, `dba:k=5`, `kreciprocal:k1=20,lam=0.3`.

    Raises:
        UserError: unknown method or parameter, or a value that is not a number.
    """
    name, _, given = spec.strip().partition(":")
    method = RERANK_METHODS.find(name.strip())
    if method is None:
        raise RERANK_METHODS.unknown(name)
    fields = {f.name: f.type for f in dataclasses.fields(method)}  # type: ignore[arg-type]
    values: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in given.split(","))):
        key, equals, text = (part.strip() for part in item.partition("="))
        if key not in fields or not equals:
            raise UserError(f"re-ranking {name}: unknown parameter {item!r}; its parameters are {', '.join(fields)}")
        try:
            values[key] = int(text) if fields[key] == "int" else float(text)
        except ValueError:
            wanted = "a whole number" if fields[key] == "int" else "a number"
            raise UserError(f"re-ranking {name}: {key}={text!r} is not {wanted}") from None
    reranker = method(**values)
    return reranker  # type: ignore[return-value]


def augment_vectors(vectors: np.ndarray, k: int, alpha: float) -> np.ndarray:
    """alpha-DBA of `(N, D)` unit vectors over themselves: exact search, each item's k nearest, itself included."""
    import faiss  # here, not at the top: `retrieval.config` reads specs (`reranker.base`) before any heavy import

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if k <= 1 or len(vectors) == 0:
        return vectors.copy()
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    scores, ids = index.search(vectors, min(k, len(vectors)))
    return _weighted_sum(None, scores, vectors[np.maximum(ids, 0)], ids, alpha)


def _weighted_sum(
    queries: np.ndarray | None, scores: np.ndarray, neighbours: np.ndarray, ids: np.ndarray, alpha: float
) -> np.ndarray:
    """Normalized `queries + sum_i max(score_i, 0)**alpha * neighbour_i` (`(n, k)` scores, `(n, k, D)` neighbours)."""
    weights = np.where(ids >= 0, np.maximum(scores, 0.0) ** alpha, 0.0).astype(np.float32)
    summed = np.einsum("nk,nkd->nd", weights, neighbours.astype(np.float32, copy=False))
    if queries is not None:
        summed += queries
    norms = np.linalg.norm(summed, axis=1, keepdims=True)
    return np.ascontiguousarray(summed / np.maximum(norms, 1e-12), dtype=np.float32)


def _identical_first(original_scores: np.ndarray, original_ids: np.ndarray, reranked: np.ndarray) -> np.ndarray:
    """`(n, k)` re-ranked ids with each query's identical results (`IDENTICAL_SCORE`) moved to the front.

    Args:
        original_scores: `(n, m)` scores of the plain search, best first (m >= k, so every identical
            result a plain top-k holds is among them).
        original_ids: `(n, m)` its ids (-1 past the end).
        reranked: `(n, k)` the re-ranked ids.
    """
    identical = (original_scores >= IDENTICAL_SCORE) & (original_ids >= 0)
    if not identical.any():
        return reranked
    out = reranked.copy()
    for row in np.flatnonzero(identical.any(axis=1)):
        first = original_ids[row][identical[row]]
        rest = reranked[row][~np.isin(reranked[row], first)]
        out[row] = np.concatenate([first, rest])[: reranked.shape[1]]
    return out


def _scores_of(queries: np.ndarray, gallery: Gallery, ids: np.ndarray) -> np.ndarray:
    """`(n, k)` inner products of each original query with its results (-inf where the id is -1)."""
    scores = np.einsum("nd,nkd->nk", queries, gallery.vectors(ids))
    return np.where(ids >= 0, scores, -np.inf).astype(np.float32)


def _nearest_mask(ranks: np.ndarray, k: int) -> np.ndarray:
    """`(B, n, n)` bool: j is among i's k nearest (i itself counts as the first)."""
    mask = np.zeros(ranks.shape, dtype=bool)
    np.put_along_axis(mask, ranks[:, :, :k], True, axis=2)
    return mask


def _reciprocal(ranks: np.ndarray, k: int) -> np.ndarray:
    """`(B, n, n)` bool: i and j are each among the other's k + 1 nearest (the k-reciprocal sets R(i, k))."""
    forward = _nearest_mask(ranks, k + 1)
    return forward & forward.transpose(0, 2, 1)


def _expand(reciprocal: np.ndarray, half: np.ndarray) -> np.ndarray:
    """R*(i): R(i, k1) joined with each R(c, k1/2), c in R(i, k1), that shares at least 2/3 of itself with it."""
    overlap = np.einsum("bij,bkj->bik", reciprocal.astype(np.float32), half.astype(np.float32))
    sizes = half.sum(axis=2)[:, None, :]
    joined = reciprocal & (overlap > 2.0 / 3.0 * sizes - 1e-6)
    return reciprocal | (np.einsum("bij,bjk->bik", joined.astype(np.float32), half.astype(np.float32)) > 0)


def _check_positive(method: RerankMethod, name: str) -> None:
    value = getattr(method, name)
    if int(value) != value or value < 1:
        raise UserError(f"re-ranking {method.name}: {name} must be a whole number >= 1, got {value:g}")
