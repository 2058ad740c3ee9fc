"""Equal scores come in id order, also at the k-th place: FAISS kept the later copies of a duplicate first."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from retrieval.index import SearchIndex
from retrieval.index.filter_language import parse_where
from retrieval.index.tie_order import TIED_PAST_K, ranked


def _copies(n: int = 40, dim: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`n` vectors, each one of 3 directions (many exact duplicates), which direction each is, and the directions."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((3, dim)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    pick = rng.integers(0, 3, n)
    return base[pick], pick, base


def test_faiss_returns_duplicates_in_id_order_and_the_first_copies_at_the_kth_place() -> None:
    vectors, pick, base = _copies()
    index = SearchIndex.build(vectors, pa.table({"x": pa.array(range(40))}), kind="flat", progress=False)
    copies = np.flatnonzero(pick == 0)
    for k in (1, 3, len(copies), len(copies) + 4):
        _, ids = index.search(base[0], k)
        assert ids[0][: min(k, len(copies))].tolist() == copies[:k].tolist()  # was: the last copies, last first
    _, ids = index.search(base[0], 3, filter=parse_where("x >= 3"))
    assert ids[0].tolist() == copies[copies >= 3][:3].tolist()


def test_a_search_is_asked_once_more_when_its_next_result_ties_with_the_kth() -> None:
    scores = np.array([[0.9] * 7 + [0.5] * 3], np.float32)
    ids = np.array([[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]])
    widths = []

    def search(width: int) -> tuple[np.ndarray, np.ndarray]:
        widths.append(width)
        return scores[:, :width], ids[:, :width]

    found_scores, found = ranked(search, 2)
    assert widths == [3, 2 + TIED_PAST_K] and found.tolist() == [[3, 4]] and np.all(found_scores == scores[0, 0])
    widths.clear()
    assert ranked(search, 7)[1].tolist() == [[3, 4, 5, 6, 7, 8, 9]] and widths == [8]  # the 8th does not tie
    widths.clear()
    assert ranked(search, 12)[1].tolist() == [[3, 4, 5, 6, 7, 8, 9, 0, 1, 2, -1, -1]] and widths == [13]
    widths.clear()
    assert ranked(search, 2, exact=False)[1].tolist() == [[8, 9]] and widths == [2]  # only ordered


def test_a_collapsed_index_gives_the_first_ids_while_the_ties_fit_in_the_second_search() -> None:
    """Every vector equal (a collapsed model): the first k ids up to `TIED_PAST_K` copies; past it, k real ids."""
    index = SearchIndex.build(np.ones((1200, 4), np.float32), kind="flat", progress=False)
    assert index.search(np.ones(4, np.float32), 3)[1].tolist() == [[0, 1, 2]]
    larger = SearchIndex.build(np.ones((TIED_PAST_K + 100, 4), np.float32), kind="flat", progress=False)
    _, ids = larger.search(np.ones(4, np.float32), 3)
    assert len(set(ids[0].tolist())) == 3 and ids.min() >= 0
