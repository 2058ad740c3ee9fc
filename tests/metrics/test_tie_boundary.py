"""Ties at the depth a query searches: `retrieval_metrics` against the tie rule computed naively.

The tie rule (`retrieval.metrics.ranking`'s docstring): a query's ranking is by the float32 score
FAISS's per-pair kernel gives each (query, gallery item) pair, items with equal scores count in
every order equally. The reference here scores every pair with that kernel, ranks the whole gallery
with numpy and applies the textbook expectations one query at a time; the data plants what makes
the searched depth hard to get right: exact ties, near-copies whose scores lie exactly one float32
ulp apart at a query's boundary (position R or max(ks)), duplicate vectors, a run of copies longer
than the search margin, and classes far larger than max(ks).
"""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.metrics import ranking, retrieval_metrics
from tests.metrics.test_retrieval_metrics import (
    assert_metrics_equal,
    clustered_data,
    oracle_metrics,
    random_split,
    with_duplicates,
)

KS = (1, 2, 4, 8)


def pair_scores(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """`(Q, G)` float32 scores of every query with every gallery row: the per-pair kernel that defines a tie."""
    every_row = np.broadcast_to(np.arange(len(gallery)), (len(queries), len(gallery)))
    return ranking._pair_scores(queries, gallery, every_row)


def tie_rule_reference(
    embeddings: np.ndarray,
    labels: np.ndarray,
    ks: tuple[int, ...],
    query_mask: np.ndarray | None = None,
    gallery_mask: np.ndarray | None = None,
) -> dict[str, float]:
    """Every query ranks the whole gallery by its pair scores; runs of equal float32 scores are ties."""
    return oracle_metrics(embeddings, labels, ks, query_mask, gallery_mask, pair_scores(embeddings, embeddings))


def one_ulp_from(query: np.ndarray, vector: np.ndarray, direction: float) -> np.ndarray:
    """A copy of `vector` whose pair score with `query` is exactly one float32 ulp above (+1) or below (-1) its own.

    Steps one coordinate up to 4096 ulps, all at once, and keeps the first step that moves the score;
    the coordinates the query weighs least move it in the finest steps, so they are tried first.
    """
    score = pair_scores(query[None, :], vector[None, :])[0, 0]
    target = np.nextafter(score, np.float32(direction * np.inf))
    for coordinate in np.argsort(np.abs(query)):
        if abs(query[coordinate]) < 1e-3:
            continue
        steps = np.sign(query[coordinate]) * direction * np.arange(1, 4097)
        nudged = np.repeat(vector[None, :], len(steps), axis=0)
        nudged[:, coordinate] = (vector[coordinate].view(np.int32) + steps.astype(np.int32)).view(np.float32)
        moved = pair_scores(query[None, :], nudged)[0]
        first = int(np.argmax(moved != score))
        if moved[first] == target:
            return nudged[first]
    raise AssertionError("no coordinate lands the score one ulp away")


def widths(labels: np.ndarray) -> np.ndarray:
    """`(N,)` neighbors each item needs as a query of the whole set: max(max(KS), R)."""
    codes, counts = np.unique(labels, return_inverse=True, return_counts=True)[1:]
    return np.maximum(max(KS), counts[codes] - 1)


def ranked(embeddings: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(n, N - 1)` each query's other rows by decreasing pair score, and those scores."""
    scores = pair_scores(embeddings[queries], embeddings)
    scores[np.arange(len(queries)), queries] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :-1]
    return order, np.take_along_axis(scores, order, axis=1)


def planted_ties(seed: int, run: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clustered data (one class of up to 80, others up to 25) with duplicate pairs, a `run` of copies of mixed labels,
    and for one query of each other class a one-ulp near-copy of its boundary item (position width - 1),
    added under a label of its own so that no class's R changes (a later one may shift an earlier one's).

    Returns the embeddings, the labels and the planted queries.
    """
    embeddings, labels = clustered_data(num_classes=12, max_class_size=25, seed=seed)
    big, big_labels = clustered_data(num_classes=2, max_class_size=80, seed=seed + 100)
    embeddings = np.concatenate([embeddings, big[big_labels == big_labels[0]]])
    labels = np.concatenate([labels, np.full(int((big_labels == big_labels[0]).sum()), labels.max() + 1)])
    embeddings, labels = with_duplicates(embeddings, labels, seed=seed)
    rng = np.random.default_rng(seed)
    copies = rng.permutation(len(labels))[:run]
    embeddings[copies] = embeddings[copies[:1]]
    labels[copies] = rng.choice(np.unique(labels)[:3], run)
    candidates = np.setdiff1d(np.arange(len(labels)), copies)
    queries = np.array([rng.choice(candidates[labels[candidates] == label]) for label in np.unique(labels[candidates])])
    for number, query in enumerate(queries):  # one at a time, each on the data the previous ones left
        order, _ = ranked(embeddings, np.array([query]))
        item = order[0, widths(labels)[query] - 1]
        near = one_ulp_from(embeddings[query], embeddings[item], 1.0 if number % 2 else -1.0)
        embeddings, labels = np.concatenate([embeddings, near[None, :]]), np.append(labels, labels.max() + 1)
    return embeddings, labels, queries


def boundary_gaps(embeddings: np.ndarray, labels: np.ndarray, queries: np.ndarray) -> list[int]:
    """For each query, how many float32 ulps separate its pair scores at positions width - 1 and width."""
    _, scores = ranked(embeddings, queries)
    rows, width = np.arange(len(queries)), widths(labels)[queries]
    above, below = scores[rows, width - 1], scores[rows, width]
    return np.abs(above.view(np.int32).astype(np.int64) - below.view(np.int32).astype(np.int64)).tolist()


def count_searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of queries of every gallery search `retrieval_metrics` makes from here on."""
    searches: list[int] = []
    nearest = ranking._Gallery.nearest

    def counted(gallery: ranking._Gallery, chunk: ranking._Queries, width: int, excludes_self: bool):  # noqa: ANN202
        searches.append(len(chunk.rows))
        return nearest(gallery, chunk, width, excludes_self)

    monkeypatch.setattr(ranking._Gallery, "nearest", counted)
    return searches


@pytest.fixture(params=["margin", "no margin"])
def search_margin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The default margin past the needed depth, or one neighbor only, so boundary near-ties need a second search."""
    if request.param == "no margin":
        monkeypatch.setattr(ranking, "_search_depth", lambda width, max_width, reranked: min(width + 1, max_width))
    return str(request.param)


@pytest.mark.parametrize("seed", [0, 1])
def test_planted_ties_match_the_naive_tie_rule(seed: int, search_margin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    embeddings, labels, queries = planted_ties(seed)
    gaps = boundary_gaps(embeddings, labels, queries)
    assert gaps.count(0) >= 2 and gaps.count(1) >= 4  # the data holds exact and one-ulp ties at boundaries
    monkeypatch.setattr(ranking, "_SLOTS_PER_CHUNK", 2000)  # several chunks, and re-searches split in several
    searches = count_searches(monkeypatch)
    assert_metrics_equal(retrieval_metrics(embeddings, labels, KS), tie_rule_reference(embeddings, labels, KS))
    assert sum(searches) > len(labels)  # some queries were searched again: the 40 copies, and near-ties without margin


def test_planted_ties_with_query_and_gallery_masks(search_margin: str) -> None:
    embeddings, labels, _ = planted_ties(2)
    query_mask, gallery_mask = random_split(len(labels), seed=2)
    actual = retrieval_metrics(embeddings, labels, KS, query_mask, gallery_mask)
    assert_metrics_equal(actual, tie_rule_reference(embeddings, labels, KS, query_mask, gallery_mask))


@pytest.mark.slow
def test_a_depth_past_every_class_matches_the_naive_tie_rule() -> None:
    """max(ks) beyond the gallery: every query ranks the whole gallery, the last run included."""
    embeddings, labels, _ = planted_ties(3)
    ks = (1, 100, 10_000)
    assert_metrics_equal(retrieval_metrics(embeddings, labels, ks), tie_rule_reference(embeddings, labels, ks))


def test_near_ties_at_the_boundary_are_decided_without_a_second_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-ulp near-copies at the planted boundaries and duplicate pairs, but no run of exact ties longer than
    the search margin: one search of every query, and the figures of the tie rule."""
    embeddings, labels, _ = planted_ties(4, run=0)
    searches = count_searches(monkeypatch)
    result = retrieval_metrics(embeddings, labels, KS)
    assert searches == [result["num_queries"]]
    assert_metrics_equal(result, tie_rule_reference(embeddings, labels, KS))
