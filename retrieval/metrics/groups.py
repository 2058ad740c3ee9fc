"""Results per training-frequency group: head / mid / tail thirds of the training classes.

On long-tailed data an average over all queries hides the rare classes. These functions split
the training classes into three groups by how many training images they have and score
retrieval (Recall@1, MAP@R) and the proxy classifier (argmax cosine to the class proxies) within
each group. They apply on closed-set protocols only, where test classes were seen in training.
"""

from __future__ import annotations

import numpy as np

from retrieval.errors import UserError
from retrieval.metrics.ranking import retrieval_metrics

__all__ = ["GROUP_NAMES", "class_counts", "frequency_groups", "group_metrics", "proxy_predictions"]

GROUP_NAMES = ("head", "mid", "tail")


def class_counts(train_labels: np.ndarray, num_classes: int) -> np.ndarray:
    """`(K,)` training images per class; with `(N, K)` multi-hot rows, the images carrying each label."""
    return train_labels.sum(axis=0) if train_labels.ndim == 2 else np.bincount(train_labels, minlength=num_classes)


def frequency_groups(train_labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Head / mid / tail group of every training class, by its number of training images.

    Classes are ranked by decreasing training count (ties: lower class index first, so the split
    is deterministic) and cut into three consecutive thirds of the ranking (`np.array_split`: with
    K % 3 != 0 the head and mid thirds get the extra classes). With fewer than 3 classes some
    groups are empty.

    Args:
        train_labels: `(N_train,)` training class indices in `[0, num_classes)`, or `(N_train, K)`
            multi-hot rows (a class's count is then the number of images carrying it).
        num_classes: K.

    Returns:
        `(K,)` int64 group of each class: 0 head (most images), 1 mid, 2 tail.

    Example:
        >>> frequency_groups(np.array([0, 0, 0, 1, 2, 2]), 3).tolist()
        [0, 2, 1]
    """
    counts = class_counts(train_labels, num_classes)
    ranking = np.lexsort((np.arange(num_classes), -counts))
    groups = np.empty(num_classes, dtype=np.int64)
    for group, members in enumerate(np.array_split(ranking, len(GROUP_NAMES))):
        groups[members] = group
    return groups


def proxy_predictions(embeddings: np.ndarray, proxies: np.ndarray) -> np.ndarray:
    """`(N, K)` cosine of every embedding to every class proxy (the proxy classifier's scores).

    Args:
        embeddings: `(N, D)` embeddings (normalized here).
        proxies: `(K, D)` class proxies (normalized here).
    """
    features = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    anchors = proxies / np.maximum(np.linalg.norm(proxies, axis=1, keepdims=True), 1e-12)
    return (features @ anchors.T).astype(np.float32)


def group_metrics(
    embeddings: np.ndarray,
    labels: np.ndarray,
    train_class: np.ndarray,
    class_groups: np.ndarray,
    query_mask: np.ndarray | None = None,
    gallery_mask: np.ndarray | None = None,
    proxies: np.ndarray | None = None,
) -> dict[str, float]:
    """Recall@1 and MAP@R per frequency group, and the proxy classifier's accuracy overall and per group.

    A query belongs to the group of its class; queries of classes that never trained (zero-shot
    classes) are left out. Retrieval searches the whole gallery, as in `retrieval_metrics`: only the
    queries are split. The proxy classifier predicts `argmax_j cos(f_i, P_j)` for every image of a
    trained class (queries and gallery alike).

    Args:
        embeddings: `(N, D)` L2-normalized embeddings of the split.
        labels: `(N,)` class ids of the split (its own numbering).
        train_class: `(N,)` training class index of each item's class, -1 when that class did not train.
        class_groups: `(K,)` group of each training class, from `frequency_groups`.
        query_mask: `(N,)` bool query rows; None for every row.
        gallery_mask: `(N,)` bool gallery rows; None for every row.
        proxies: `(K, D)` class proxies of a proxy loss; None for pair losses (no classifier).

    Returns:
        `{group}/recall@1`, `{group}/map@r` and `{group}/num_queries` for each non-empty group;
        with proxies, `proxy_accuracy` and `{group}/proxy_accuracy`. Empty when no item's class trained.
    """
    seen = train_class >= 0
    if not seen.any():
        return {}
    is_query = np.ones(len(labels), dtype=bool) if query_mask is None else np.asarray(query_mask, dtype=bool)
    item_group = np.where(seen, class_groups[np.maximum(train_class, 0)], -1)
    result: dict[str, float] = {}
    for group, name in enumerate(GROUP_NAMES):
        queries = is_query & (item_group == group)
        if not queries.any():
            continue
        try:
            scores = retrieval_metrics(embeddings, labels, (1,), queries, gallery_mask)
        except UserError:  # none of this group's queries has a same-class gallery item: nothing to score
            continue
        result[f"{name}/recall@1"] = scores["recall@1"]
        result[f"{name}/map@r"] = scores["map@r"]
        result[f"{name}/num_queries"] = scores["num_queries"]
    if proxies is not None:
        correct = proxy_predictions(embeddings[seen], proxies).argmax(axis=1) == train_class[seen]
        result["proxy_accuracy"] = float(correct.mean())
        for group, name in enumerate(GROUP_NAMES):
            members = item_group[seen] == group
            if members.any():
                result[f"{name}/proxy_accuracy"] = float(correct[members].mean())
    return result
