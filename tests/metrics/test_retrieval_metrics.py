"""Tests for `retrieval.metrics.retrieval_metrics`.

References: a brute-force numpy oracle (full similarity matrix, one python loop per query,
the textbook formulas) and pytorch-metric-learning's `AccuracyCalculator`.
"""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from retrieval.errors import UserError
from retrieval.metrics import check_queries_have_positives, retrieval_metrics

KS = (1, 2, 4, 8)


def clustered_data(
    num_classes: int = 12, max_class_size: int = 25, dim: int = 16, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """L2-normalized float32 embeddings (N, dim) around one center per class, labels (N,).

    Class sizes vary from 1 to `max_class_size`; the last class has a single item, so its
    query has no positive when every item is in the gallery. Labels are sparse ids.
    """
    rng = np.random.default_rng(seed)
    sizes = np.append(rng.integers(2, max_class_size + 1, num_classes - 1), 1)
    labels = np.repeat(rng.choice(1000, num_classes, replace=False) - 500, sizes)
    centers = rng.normal(size=(num_classes, dim))
    embeddings = np.repeat(centers, sizes, axis=0) + rng.normal(scale=0.9, size=(len(labels), dim))
    order = rng.permutation(len(labels))
    return normalize(embeddings[order]), labels[order]


def normalize(embeddings: np.ndarray) -> np.ndarray:
    return (embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)).astype(np.float32)


def with_duplicates(
    embeddings: np.ndarray, labels: np.ndarray, seed: int = 1, relabel_half: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Overwrite disjoint pairs of rows with exact copies; with `relabel_half` half the copies get another label."""
    rng = np.random.default_rng(seed)
    embeddings, labels = embeddings.copy(), labels.copy()
    pairs = rng.permutation(len(labels))[:40].reshape(20, 2)
    for number, (source, copy) in enumerate(pairs):
        embeddings[copy] = embeddings[source]
        labels[copy] = labels[source] + 1 if relabel_half and number % 2 else labels[source]
    return embeddings, labels


def oracle_metrics(
    embeddings: np.ndarray,
    labels: np.ndarray,
    ks: tuple[int, ...],
    query_mask: np.ndarray | None = None,
    gallery_mask: np.ndarray | None = None,
    similarities: np.ndarray | None = None,
) -> dict[str, float]:
    """Brute force: rank the whole gallery for each query, apply the formulas one query at a time.

    Exactly tied items count in every order equally: each metric is its expectation over the
    orders of every run of equal scores, from textbook probability (`expected_scores`).
    `similarities` (N, N) are the scores to rank by; the float64 inner products by default.
    """
    everything = np.ones(len(labels), dtype=bool)
    query_mask = everything if query_mask is None else query_mask
    gallery_mask = everything if gallery_mask is None else gallery_mask
    if similarities is None:
        similarities = embeddings.astype(np.float64) @ embeddings.T.astype(np.float64)
    recall_hits = dict.fromkeys(ks, 0.0)
    average_precision = r_precision = 0.0
    num_queries = num_without_positive = 0
    for query in np.flatnonzero(query_mask):
        candidates = [item for item in np.flatnonzero(gallery_mask) if item != query]
        ranked = sorted(candidates, key=lambda item: -similarities[query, item])
        relevant = [shares_a_label(labels[item], labels[query]) for item in ranked]
        counts = collections.Counter(similarities[query, ranked].tolist())
        runs = [counts[similarities[query, item]] for item in ranked]
        if sum(relevant) == 0:
            num_without_positive += 1
            continue
        num_queries += 1
        recalls, ap, rp = expected_scores(relevant, runs, ks)
        for k in ks:
            recall_hits[k] += recalls[k]
        average_precision += ap
        r_precision += rp
    return {
        **{f"recall@{k}": recall_hits[k] / num_queries for k in ks},
        "map@r": average_precision / num_queries,
        "r_precision": r_precision / num_queries,
        "num_queries": num_queries,
        "num_queries_without_positive": num_without_positive,
    }


def expected_scores(
    relevant: list[bool], run_sizes: list[int], ks: tuple[int, ...]
) -> tuple[dict[int, float], float, float]:
    """Recall@k, AP@R and R-precision of one ranking, averaged over the orders of its tied runs.

    `run_sizes[i]` is the size of the run of equal scores holding position i (runs are
    contiguous). Position i of a run of t items with r relevant is relevant with probability
    r/t; two positions of one run both are with r(r-1)/(t(t-1)), of two runs independently.
    Recall@k misses only when every relevant-free draw of its positions misses: a product of
    hypergeometric chances, one per run that the top k cuts.
    """
    run_of, start = [], 0
    while start < len(relevant):
        size = run_sizes[start]
        run_of += [(start, size, sum(relevant[start : start + size]))] * size
        start += size

    def both(i: int, j: int) -> float:
        (a, t, r), (b, _, q) = run_of[i], run_of[j]
        if i == j:
            return r / t
        if a == b:
            return r * (r - 1) / (t * (t - 1))
        return r / t * q / run_of[j][1]

    total = sum(relevant)
    ap = sum(both(i, j) / (i + 1) for i in range(total) for j in range(i + 1)) / total
    rp = sum(run_of[i][2] / run_of[i][1] for i in range(total)) / total
    recalls = {}
    for k in ks:
        miss, i = 1.0, 0
        while i < min(k, len(relevant)):
            a, t, r = run_of[i]
            drawn = min(k, a + t) - a
            miss *= math.comb(t - r, drawn) / math.comb(t, drawn)
            i = a + t
        recalls[k] = 1.0 - miss
    return recalls, ap, rp


def shares_a_label(a: np.ndarray, b: np.ndarray) -> bool:
    """Same class id, or (multi-hot rows) at least one label in common."""
    return bool(np.any(a & b)) if np.ndim(a) else bool(a == b)


def pml_metrics(
    query: np.ndarray,
    query_labels: np.ndarray,
    reference: np.ndarray | None = None,
    reference_labels: np.ndarray | None = None,
    ref_includes_query: bool = False,
) -> dict[str, float]:
    """pytorch-metric-learning's values under our key names."""
    calculator = AccuracyCalculator(
        include=("precision_at_1", "mean_average_precision_at_r", "r_precision"),
        k="max_bin_count",
        device=torch.device("cpu"),
    )
    result = calculator.get_accuracy(query, query_labels, reference, reference_labels, ref_includes_query)
    return {
        "recall@1": result["precision_at_1"],
        "map@r": result["mean_average_precision_at_r"],
        "r_precision": result["r_precision"],
    }


def random_split(num_items: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """In-Shop-like masks: 40% queries only, 40% gallery only, 20% both."""
    role = np.random.default_rng(seed).integers(0, 5, num_items)
    return role <= 2, role >= 2


def assert_metrics_equal(actual: dict[str, float | int], expected: dict[str, float | int]) -> None:
    assert actual.keys() >= expected.keys()
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, abs=1e-9), key


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("duplicates", [False, True])
def test_matches_oracle_when_every_item_queries_all_others(seed: int, duplicates: bool) -> None:
    embeddings, labels = clustered_data(seed=seed)
    if duplicates:
        embeddings, labels = with_duplicates(embeddings, labels, seed=seed)
    ks = (*KS, 1000)
    actual = retrieval_metrics(embeddings, labels, ks=ks)
    assert_metrics_equal(actual, oracle_metrics(embeddings, labels, ks))
    assert list(actual) == [
        *(f"recall@{k}" for k in ks),
        "map@r",
        "r_precision",
        "num_queries",
        "num_queries_without_positive",
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("duplicates", [False, True])
def test_matches_oracle_with_query_and_gallery_masks(seed: int, duplicates: bool) -> None:
    embeddings, labels = clustered_data(seed=seed)
    if duplicates:
        embeddings, labels = with_duplicates(embeddings, labels, seed=seed)
    query_mask, gallery_mask = random_split(len(labels), seed=seed)
    actual = retrieval_metrics(embeddings, labels, KS, query_mask, gallery_mask)
    assert_metrics_equal(actual, oracle_metrics(embeddings, labels, KS, query_mask, gallery_mask))


def test_large_classes_span_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    embeddings, labels = clustered_data(num_classes=5, max_class_size=120, seed=3)
    monkeypatch.setattr("retrieval.metrics.ranking._SLOTS_PER_CHUNK", 500)
    assert_metrics_equal(retrieval_metrics(embeddings, labels, KS), oracle_metrics(embeddings, labels, KS))


def test_queries_outranked_by_their_own_duplicates() -> None:
    """30 tied copies outnumber the R + 1 = 10 results searched, so most copies do not retrieve themselves."""
    embeddings, labels = clustered_data(num_classes=20, max_class_size=4, seed=10)
    embeddings[:30] = embeddings[0]
    labels[:30] = np.arange(30) % 3 + labels.max() + 1
    assert_metrics_equal(retrieval_metrics(embeddings, labels, KS), oracle_metrics(embeddings, labels, KS))


def test_duplicate_of_the_query_counts_as_a_hit() -> None:
    embeddings = normalize(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.1, 1.0]]))
    result = retrieval_metrics(embeddings, np.array([5, 5, 7, 7]), ks=(1,))
    assert result["recall@1"] == result["map@r"] == result["r_precision"] == 1.0


def test_duplicate_with_another_label_is_a_miss() -> None:
    embeddings = np.array([[1.0, 0.0], [1.0, 0.0], [0.8, 0.6], [0.6, 0.8]], dtype=np.float32)
    result = retrieval_metrics(embeddings, np.array([0, 1, 0, 1]), ks=(1,))
    assert result["recall@1"] == result["map@r"] == result["r_precision"] == 0.0


def test_matches_pytorch_metric_learning_closed_set() -> None:
    embeddings, labels = with_duplicates(*clustered_data(seed=4), relabel_half=False)
    assert_metrics_equal(retrieval_metrics(embeddings, labels), pml_metrics(embeddings, labels))


def test_matches_pytorch_metric_learning_disjoint_query_and_gallery() -> None:
    embeddings, labels = clustered_data(seed=5)
    is_query = np.random.default_rng(5).random(len(labels)) < 0.5
    expected = pml_metrics(embeddings[is_query], labels[is_query], embeddings[~is_query], labels[~is_query])
    assert_metrics_equal(retrieval_metrics(embeddings, labels, KS, is_query, ~is_query), expected)


def test_matches_pytorch_metric_learning_queries_inside_gallery() -> None:
    embeddings, labels = clustered_data(seed=6)
    is_query = np.random.default_rng(6).random(len(labels)) < 0.5
    gallery_order = np.concatenate([np.flatnonzero(is_query), np.flatnonzero(~is_query)])
    expected = pml_metrics(
        embeddings[is_query], labels[is_query], embeddings[gallery_order], labels[gallery_order], True
    )
    assert_metrics_equal(retrieval_metrics(embeddings, labels, KS, query_mask=is_query), expected)


def test_queries_without_positive_are_excluded_and_counted() -> None:
    embeddings, labels = clustered_data(seed=7)
    embeddings = np.concatenate([embeddings, normalize(np.eye(3, embeddings.shape[1]))])
    labels = np.concatenate([labels, labels.max() + np.arange(1, 4)])
    lone_as_gallery_only = np.arange(len(labels)) < len(labels) - 3
    result = retrieval_metrics(embeddings, labels, KS)
    expected = retrieval_metrics(embeddings, labels, KS, query_mask=lone_as_gallery_only)
    assert result["num_queries_without_positive"] == expected["num_queries_without_positive"] + 3
    assert result == {**expected, "num_queries_without_positive": expected["num_queries_without_positive"] + 3}


def test_no_query_with_positive_raises() -> None:
    embeddings, labels = clustered_data(seed=8)
    query_mask = labels == labels[0]
    with pytest.raises(UserError, match="no query has a same-class image in the gallery"):
        retrieval_metrics(embeddings, labels, query_mask=query_mask, gallery_mask=~query_mask)


def test_torch_inputs_give_the_numpy_result() -> None:
    embeddings, labels = clustered_data(seed=9)
    query_mask, gallery_mask = random_split(len(labels))
    expected = retrieval_metrics(embeddings, labels, KS, query_mask, gallery_mask)
    actual = retrieval_metrics(
        torch.from_numpy(embeddings).requires_grad_(),
        torch.from_numpy(labels),
        KS,
        torch.from_numpy(query_mask),
        torch.from_numpy(gallery_mask),
    )
    assert actual == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"embeddings": np.ones(4, dtype=np.float32)}, "2-D"),
        ({"embeddings": np.ones((0, 2), dtype=np.float32), "labels": np.zeros(0, dtype=int)}, "2-D"),
        ({"embeddings": np.full((4, 2), np.nan)}, "NaN"),
        ({"labels": np.zeros(3, dtype=int)}, r"shape \(4,\)"),
        ({"labels": np.zeros(4)}, "integers"),
        ({"ks": ()}, "positive integers"),
        ({"ks": (0, 1)}, "positive integers"),
        ({"query_mask": np.array([0, 1, 2, 3])}, "boolean"),
        ({"gallery_mask": np.ones(3, dtype=bool)}, "boolean"),
        ({"query_mask": np.zeros(4, dtype=bool)}, "query_mask selects no rows"),
    ],
)
def test_bad_inputs_raise_user_error(kwargs: dict, message: str) -> None:
    arguments = {"embeddings": normalize(np.ones((4, 2))), "labels": np.array([0, 0, 1, 1]), **kwargs}
    with pytest.raises(UserError, match=message):
        retrieval_metrics(**arguments)


def test_positives_are_checked_before_any_embedding_exists():
    labels = np.array([0, 0, 1, 2, 2, 3])
    assert check_queries_have_positives(labels) == 2  # classes 1 and 3 have a single image
    query_mask = np.array([True, False, True, False, False, False])
    gallery_mask = ~query_mask
    assert check_queries_have_positives(labels, query_mask, gallery_mask) == 1  # class 1 has no gallery image
    with pytest.raises(UserError, match="no query has a same-class image in the gallery"):
        check_queries_have_positives(np.arange(5))


def multi_hot_data(seed: int = 3, num_items: int = 160, num_labels: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """Clustered embeddings whose items carry 1 to 3 labels (a few carry none), label 10 on 9 items only."""
    embeddings, classes = clustered_data(num_classes=8, seed=seed)
    embeddings, classes = embeddings[:num_items], np.unique(classes[:num_items], return_inverse=True)[1]
    rng = np.random.default_rng(seed)
    labels = np.zeros((len(classes), num_labels), dtype=bool)
    labels[np.arange(len(classes)), classes] = True
    labels[rng.random(len(classes)) < 0.4, 8] = True  # a label spread over every cluster
    labels[rng.permutation(len(classes))[:9], 10] = True
    labels[rng.permutation(len(classes))[:5]] = False  # unlabeled items: relevant to nobody
    return embeddings, labels


@pytest.mark.parametrize("masks", [False, True])
def test_multi_label_metrics_match_the_oracle(masks):
    embeddings, labels = multi_hot_data()
    query_mask, gallery_mask = random_split(len(labels)) if masks else (None, None)
    result = retrieval_metrics(embeddings, labels, KS, query_mask, gallery_mask)
    expected = oracle_metrics(embeddings, labels, KS, query_mask, gallery_mask)
    assert masks or result["num_queries_without_positive"] >= 5  # the unlabeled queries
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-9), key
    assert check_queries_have_positives(labels, query_mask, gallery_mask) == expected["num_queries_without_positive"]


def test_one_hot_rows_score_like_class_ids():
    embeddings, labels = clustered_data()
    one_hot = np.unique(labels, return_inverse=True)[1][:, None] == np.arange(len(np.unique(labels)))
    assert retrieval_metrics(embeddings, torch.from_numpy(one_hot), KS) == retrieval_metrics(embeddings, labels, KS)


def test_bad_multi_hot_labels_are_user_errors():
    embeddings, labels = multi_hot_data()
    with pytest.raises(UserError, match="multi-hot labels must have shape"):
        retrieval_metrics(embeddings, labels[:10], KS)
    with pytest.raises(UserError, match="bool or 0/1"):
        retrieval_metrics(embeddings, labels * 2.0, KS)


def plain_scores(relevant: list[bool], ks: tuple[int, ...]) -> tuple[dict[int, float], float, float]:
    """Recall@k, AP@R and R-precision of one fixed order (no ties), the textbook way."""
    total = sum(relevant)
    recalls = {k: float(any(relevant[:k])) for k in ks}
    ap = sum(sum(relevant[: i + 1]) / (i + 1) for i in range(total) if relevant[i]) / total
    return recalls, ap, sum(relevant[:total]) / total


def test_tied_items_count_as_the_average_over_every_order() -> None:
    """Two clusters of exact copies: each query's ranking is two runs of ties, averaged over all their orders."""
    labels = np.array([0, 0, 1, 2, 1, 0, 2])
    embeddings = normalize(np.array([[1.0, 0.0]] * 4 + [[0.6, 0.8]] * 3))
    ks = (1, 2, 3, 5)
    expected: dict[str, float] = dict.fromkeys([*(f"recall@{k}" for k in ks), "map@r", "r_precision"], 0.0)
    for query in range(len(labels)):
        others = [item for item in range(len(labels)) if item != query]
        near = [item for item in others if np.allclose(embeddings[item], embeddings[query])]
        far = [item for item in others if item not in near]
        orders = [[*a, *b] for a in itertools.permutations(near) for b in itertools.permutations(far)]
        for order in orders:
            recalls, ap, rp = plain_scores([bool(labels[item] == labels[query]) for item in order], ks)
            for k in ks:
                expected[f"recall@{k}"] += recalls[k] / len(orders) / len(labels)
            expected["map@r"] += ap / len(orders) / len(labels)
            expected["r_precision"] += rp / len(orders) / len(labels)
    assert_metrics_equal(retrieval_metrics(embeddings, labels, ks), expected)


def test_ties_make_no_figure_depend_on_row_order() -> None:
    """A collapsed model (every vector equal): any row order gives the same figures, those of chance."""
    labels = np.repeat(np.arange(5), [2, 3, 4, 5, 6])
    embeddings = np.ones((len(labels), 8), dtype=np.float32) / np.sqrt(8)
    first = retrieval_metrics(embeddings, labels, KS)
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(labels))
        assert_metrics_equal(retrieval_metrics(embeddings[order], labels[order], KS), first)
    chance = np.mean((np.bincount(labels)[labels] - 1) / (len(labels) - 1))  # a same-class item first
    assert first["recall@1"] == pytest.approx(chance) and first["r_precision"] == pytest.approx(chance)
    assert_metrics_equal(first, oracle_metrics(embeddings, labels, KS))


def test_ties_past_the_searched_depth_count_their_whole_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """30 copies tie far past the R + 1 rows first searched, so the run's size comes from a second, full search."""
    embeddings, labels = clustered_data(num_classes=20, max_class_size=4, seed=10)
    embeddings[:30] = embeddings[0]
    labels[:30] = np.arange(30) % 3 + labels.max() + 1
    monkeypatch.setattr("retrieval.metrics.ranking._SLOTS_PER_CHUNK", 300)  # several chunks, in both searches
    assert_metrics_equal(retrieval_metrics(embeddings, labels, KS), oracle_metrics(embeddings, labels, KS))
