"""Head / mid / tail results against a naive computation on a synthetic imbalanced closed-set case."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.data.datasets import _renumbered
from retrieval.metrics import frequency_groups, group_metrics, retrieval_metrics


def test_frequency_groups_rank_classes_by_training_count():
    counts = np.array([5, 40, 1, 12, 12, 3, 7])  # 7 classes: thirds of 3, 2, 2
    labels = np.repeat(np.arange(7), counts)
    groups = frequency_groups(labels, 7)
    assert groups.tolist() == [1, 0, 2, 0, 0, 2, 1]  # head 1, 3, 4 (tie: lower index first), mid 6, 0, tail 5, 2
    for head in np.flatnonzero(groups == 0):  # every head class has at least the count of every tail class
        assert counts[head] >= counts[groups == 2].max()


def _naive(embeddings, labels, train_class, groups, proxies):
    """Recall@1 of each query by a double loop, averaged per group; proxy accuracy by a loop."""
    result = {}
    group_of = {i: groups[c] for i, c in enumerate(train_class) if c >= 0}
    for group, name in enumerate(["head", "mid", "tail"]):
        hits = []
        for i in (i for i, g in group_of.items() if g == group):
            similarities = [(float(embeddings[i] @ embeddings[j]), j) for j in range(len(labels)) if j != i]
            nearest = max(similarities)[1]
            hits.append(labels[nearest] == labels[i])
        result[f"{name}/recall@1"] = np.mean(hits)
        predictions = [int(np.argmax([embeddings[i] @ p / np.linalg.norm(p) for p in proxies])) for i in group_of]
        correct = [pred == train_class[i] for pred, i in zip(predictions, group_of, strict=True)]
        members = [groups[train_class[i]] == group for i in group_of]
        result[f"{name}/proxy_accuracy"] = np.mean(np.array(correct)[members])
    return result


def test_group_metrics_equal_a_naive_computation_on_imbalanced_data():
    rng = np.random.default_rng(0)
    num_classes, dim = 9, 6
    train_labels = np.repeat(np.arange(num_classes), [60, 3, 30, 2, 45, 8, 20, 4, 12])  # imbalanced training set
    proxies = rng.normal(size=(num_classes, dim))
    test_classes = np.repeat(np.arange(num_classes), 5)
    labels = np.concatenate([test_classes + 100, [500, 500]])  # test ids in their own numbering, and an unseen class
    train_class = np.concatenate([test_classes, [-1, -1]])
    centres = np.concatenate([proxies[test_classes], rng.normal(size=(2, dim))])
    embeddings = centres + rng.normal(scale=1.2, size=centres.shape)
    embeddings = (embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)).astype(np.float32)
    groups = frequency_groups(train_labels, num_classes)

    result = group_metrics(embeddings, labels, train_class, groups, proxies=proxies)
    expected = _naive(embeddings, labels, train_class, groups, proxies)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value), key
    assert 0 < result["tail/recall@1"] < 1 and 0 < result["tail/proxy_accuracy"] < 1  # neither case is trivial
    assert sum(result[f"{g}/num_queries"] for g in ("head", "mid", "tail")) == len(test_classes)
    assert group_metrics(embeddings, labels, np.full(len(labels), -1), groups) == {}  # zero-shot: nothing to split


def test_renumbering_maps_held_out_and_unknown_classes_to_minus_one():
    trained = np.array([0, 2, 5])
    assert _renumbered(np.array([5, 0, 1, 2, -1, 7]), trained).tolist() == [2, 0, -1, 1, -1, -1]


@pytest.mark.parametrize("collapsed", [False, True])
def test_groups_average_to_the_total_under_ties(collapsed):
    """Exact copies and a collapsed model (every vector equal): each query scores the same in its group as in
    the total, so the groups' Recall@1 and MAP@R, weighted by their queries, are the total's. Classes are
    small, so the total searches deeper (max(ks) = 8) than a group (R): the depth must not order the ties."""
    rng = np.random.default_rng(1)
    train_labels = np.repeat(np.arange(6), [40, 30, 20, 10, 5, 3])
    labels = np.repeat(np.arange(6), [6, 5, 4, 3, 3, 2])
    embeddings = rng.normal(size=(len(labels), 8)).astype(np.float32)
    embeddings[1::2] = embeddings[::2][: len(embeddings[1::2])]  # every other row copies its neighbour
    if collapsed:
        embeddings[:] = 1.0
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    groups = frequency_groups(train_labels, 6)
    total = retrieval_metrics(embeddings, labels, (1, 2, 4, 8))
    split = group_metrics(embeddings, labels, labels, groups)
    for metric in ("recall@1", "map@r"):
        weighted = sum(split[f"{g}/{metric}"] * split[f"{g}/num_queries"] for g in ("head", "mid", "tail"))
        assert weighted / total["num_queries"] == pytest.approx(total[metric], abs=1e-12), metric
