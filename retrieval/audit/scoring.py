"""Label issues, outliers and confused classes, scored by cleanlab over the toolkit's own kNN graph.

The class probabilities cleanlab needs are the kNN label distribution: for each image, the share
of its k nearest other images in each class (add-one smoothed), which is out-of-sample because an
image is never its own neighbour. `Datalab.find_issues` gets them with the FAISS graph, so neither
the label scores nor the outlier scores build scikit-learn's neighbours. Confused class pairs are
cleanlab's `find_overlapping_classes` over the same probabilities. Without labels only outliers
are scored.

Outliers are ranked by how far an image and its neighbours lie from every class (`class_distance`)
when there are labels, by cleanlab's kNN outlier score otherwise. Out-of-domain images come in
groups (a batch of scans, another catalogue's photos) that are each other's close neighbours, so a
distance to the neighbours misses them (the planted digits: none found); their distance to the
nearest class's mean direction, averaged over the neighbourhood, finds them (docs/audit.md).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from retrieval.audit.knn_graph import KnnGraph

__all__ = ["ClassPair", "Scores", "class_distance", "knn_label_probabilities", "score_issues"]

_FENCE = 3.0  # interquartile ranges above the third quartile: Tukey's far-out fence for the flagged outliers


@dataclass(frozen=True)
class ClassPair:
    """Two classes whose images are often each other's neighbours: class indices, count and joint share."""

    first: int
    second: int
    count: int  # images of one class that cleanlab counts as likely belonging to the other
    joint: float  # that count's share of all images (cleanlab's joint probability)


@dataclass(frozen=True)
class Scores:
    """cleanlab's verdicts per row; label fields are None without labels."""

    outlier_score: np.ndarray  # (N,) cleanlab's kNN outlier score in (0, 1]: lower is more unusual
    strangeness: (
        np.ndarray
    )  # (N,) how outliers are ranked, higher is stranger: `class_distance`, else 1 - outlier_score
    is_outlier: np.ndarray  # (N,) bool
    label_score: np.ndarray | None = None  # (N,) in [0, 1]: lower is more likely mislabelled
    is_label_issue: np.ndarray | None = None  # (N,) bool
    predicted: np.ndarray | None = None  # (N,) the class the neighbours say
    class_pairs: tuple[ClassPair, ...] = ()


def knn_label_probabilities(graph: KnnGraph, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """`(N, C)` rows summing to 1: the class shares of each row's k neighbours, add-one smoothed."""
    counts = np.zeros((len(labels), num_classes))
    np.add.at(counts, (np.repeat(np.arange(len(labels)), graph.k), labels[graph.neighbours].ravel()), 1.0)
    return (counts + 1.0 / num_classes) / (graph.k + 1.0)


def class_distance(graph: KnnGraph, embeddings: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """`(N,)` 1 - the best cosine to a class's mean direction, averaged over each row and its k neighbours."""
    means = np.zeros((num_classes, embeddings.shape[1]))
    np.add.at(means, labels, embeddings)
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    far = 1.0 - (embeddings @ means.T).max(axis=1)
    return (far + far[graph.neighbours].sum(axis=1)) / (graph.k + 1)


def score_issues(
    graph: KnnGraph, embeddings: np.ndarray, labels: np.ndarray | None, num_classes: int = 0, pairs: int = 20
) -> Scores:
    """cleanlab's label issues (with labels), outliers and the `pairs` most confused class pairs."""
    with warnings.catch_warnings():  # cleanlab's own deprecation notices about pandas are not the user's to act on
        warnings.filterwarnings("ignore", module=r"cleanlab\.")
        return _scores(graph, embeddings, labels, num_classes, pairs)


def _scores(graph: KnnGraph, embeddings: np.ndarray, labels: np.ndarray | None, num_classes: int, pairs: int) -> Scores:
    import pandas as pd
    from cleanlab import Datalab
    from cleanlab.dataset import find_overlapping_classes

    knn_graph = graph.cleanlab_graph()
    if labels is None:
        lab = Datalab(data=pd.DataFrame({"row": np.arange(len(graph.neighbours))}), verbosity=0)
        lab.find_issues(knn_graph=knn_graph, issue_types={"outlier": {"k": graph.k}})
        outliers = lab.get_issues("outlier")
        outlier_score = outliers["outlier_score"].to_numpy()
        return Scores(outlier_score, 1.0 - outlier_score, outliers["is_outlier_issue"].to_numpy())
    probabilities = knn_label_probabilities(graph, labels, num_classes)
    lab = Datalab(data=pd.DataFrame({"label": labels}), label_name="label", verbosity=0)
    issue_types = {"label": {"k": graph.k}, "outlier": {"k": graph.k}}
    lab.find_issues(pred_probs=probabilities, knn_graph=knn_graph, issue_types=issue_types)
    label_issues, outliers = lab.get_issues("label"), lab.get_issues("outlier")
    overlapping = find_overlapping_classes(labels=labels, pred_probs=probabilities)
    class_pairs = tuple(
        ClassPair(int(row["Class Index A"]), int(row["Class Index B"]), int(row["Num Overlapping Examples"]), joint)
        for _, row in overlapping.head(pairs).iterrows()
        if (joint := float(row["Joint Probability"])) > 0
    )
    strangeness = class_distance(graph, embeddings, labels, num_classes)
    quartiles = np.percentile(strangeness, [25, 75])
    fence = quartiles[1] + _FENCE * (quartiles[1] - quartiles[0])
    return Scores(
        outliers["outlier_score"].to_numpy(),
        strangeness,
        strangeness > fence,
        label_issues["label_score"].to_numpy(),
        label_issues["is_label_issue"].to_numpy(),
        probabilities.argmax(axis=1),
        class_pairs,
    )
