"""Properties of every re-ranking method over a built index, filtered or not, at gallery sizes 1 to 300.

What `index query` and `serve` return is `reranker.search(IndexGallery(index, where), queries, k)` (or
`index.search` without a method) with the padding ids (-1) dropped. For every method and every input:
- exactly min(k, items passing the filter) results, padding last, no id twice, each passing the filter;
- finite scores, each the inner product of the query with the item's stored vector (so `--min-score` means
  the same with and without re-ranking); without a method, and with `dba` (a plain search over the
  augmented vectors), in descending order; `qe` and `kreciprocal` re-order and keep each item's score;
- a stored item searched for comes back first (itself, or a stored copy of it). Not for `dba`: it stores
  each item as the average of its neighbours, so the item's own vector is not in the index
  (`retrieval.core.rerank`'s docstring).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval.core.rerank import IDENTICAL_SCORE, RERANK_METHODS, DatabaseAugmentation, KReciprocal, Reranker
from retrieval.index import SearchIndex
from retrieval.index.filter_language import parse_where
from retrieval.index.gallery import IndexGallery
from tests.properties import examples

pytestmark = pytest.mark.property
_GROUPS = 4  # each item's `group` is 0-3; the filter `group <= t` passes none to all of them


@st.composite
def rerankers(draw: st.DrawFn) -> Reranker | None:
    """No method, or any method with parameters from its grid's range and past it (k-reciprocal's shortlist too)."""
    name = draw(st.sampled_from([None, *RERANK_METHODS]))
    if name is None:
        return None
    method = RERANK_METHODS[name]
    values = {key: draw(st.sampled_from(grid)) for key, grid in method.grid_values.items()}
    for key in ("k", "k1", "k2"):
        if key in values:
            values[key] = draw(st.one_of(st.just(values[key]), st.integers(1, 40)))
    if method is KReciprocal:
        values["shortlist"] = draw(st.integers(1, 150))
    return method(**values)  # type: ignore[return-value]


@st.composite
def galleries(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """`(N, D)` unit vectors in a few clusters, N in 1..300, some stored twice; `(N,)` groups."""
    n = draw(st.integers(1, 300))
    dim = draw(st.integers(2, 16))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    centres = rng.normal(size=(draw(st.integers(1, 8)), dim))
    vectors = centres[rng.integers(len(centres), size=n)] + draw(st.sampled_from([0.05, 0.3, 1.0])) * rng.normal(
        size=(n, dim)
    )
    copies = draw(st.integers(0, n // 2))
    vectors[rng.choice(n, copies, replace=False)] = vectors[rng.integers(n, size=copies)]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), rng.integers(_GROUPS, size=n)


@examples(0.5)
@given(gallery=galleries(), reranker=rerankers(), k=st.integers(1, 60), limit=st.none() | st.integers(-1, _GROUPS))
def test_every_reranker_returns_min_k_passing_finite_scores_and_the_query_first(gallery, reranker, k, limit):
    vectors, groups = gallery
    augmentation = reranker.spec() if isinstance(reranker, DatabaseAugmentation) else None
    index = SearchIndex.build(
        vectors, {"group": groups.tolist()}, kind="flat", database_augmentation=augmentation, progress=False
    )
    where = None if limit is None else parse_where(f"group <= {limit}")
    passing = np.flatnonzero(groups <= (limit if limit is not None else _GROUPS))
    queries = vectors[passing[:3]] if len(passing) else vectors[:1]
    if reranker is None or isinstance(reranker, DatabaseAugmentation):
        scores, ids = index.search(queries, k, filter=where)
    else:
        scores, ids = reranker.search(IndexGallery(index, where), queries, k)

    expected = min(k, len(passing))
    assert ids.shape == (len(queries), k)
    assert (ids[:, :expected] >= 0).all() and (ids[:, expected:] == -1).all()
    stored = index.vectors(ids[:, :expected].ravel()).reshape(len(queries), expected, index.dim)
    for query, row, row_scores, row_stored in zip(queries, ids, scores, stored, strict=True):
        found = row[:expected]
        assert len(set(found.tolist())) == expected
        assert np.isin(found, passing).all()
        assert np.isfinite(row_scores[:expected]).all()
        np.testing.assert_allclose(row_scores[:expected], row_stored @ query, atol=1e-5)
        if reranker is None or isinstance(reranker, DatabaseAugmentation):
            assert (np.diff(row_scores[:expected]) <= 1e-6).all()
        elif len(passing) and expected:
            assert row_stored[0] @ query >= IDENTICAL_SCORE  # the query's own item, or a stored copy of it
