"""Embed a dataset and score retrieval on it."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset
from tqdm import tqdm

from retrieval.data import EvalSplit, ImageLoader
from retrieval.errors import UserError
from retrieval.metrics import group_metrics, retrieval_metrics

__all__ = ["KS", "closing_lines", "embed_dataset", "evaluate_model", "format_metrics", "score_split"]

KS = (1, 2, 4, 8)


@torch.no_grad()
def embed_dataset(
    model: nn.Module,
    dataset: Dataset,
    batch_size: int,
    device: torch.device,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
) -> np.ndarray:
    """`(N, D)` float32 embeddings of every item of `dataset`, in order.

    The rows of images left out under `data.on_bad_image: skip` are NaN (`evaluate_model` drops them).
    """
    loader = ImageLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    was_training = model.training
    model.eval()
    autocast = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else nullcontext()
    chunks = []
    for images, _ in tqdm(loader, desc="embed", leave=False, disable=None):
        images = images.to(device, non_blocking=True)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast:
            chunks.append(model(images).float().cpu())
    model.train(was_training)
    if not chunks:
        raise UserError(f"none of the {len(dataset)} images could be read (data.on_bad_image=skip skipped them all)")
    embedded = torch.cat(chunks).numpy()
    if not loader.skipped_indices:
        return embedded
    embeddings = np.full((len(dataset), embedded.shape[1]), np.nan, dtype=np.float32)
    embeddings[np.setdiff1d(np.arange(len(dataset)), loader.skipped_indices)] = embedded
    return embeddings


def evaluate_model(
    model: nn.Module,
    split: EvalSplit,
    batch_size: int,
    device: torch.device,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
    class_groups: np.ndarray | None = None,
    proxies: torch.Tensor | None = None,
) -> dict[str, float]:
    """Recall@K, MAP@R and R-precision of `model` on one split (validation or test) with its protocol.

    With `class_groups` and `proxies`, closed-set splits get the per-group results of `score_split`.
    """
    embeddings = embed_dataset(model, split.dataset, batch_size, device, num_workers, amp_dtype, channels_last)
    proxy_array = None if proxies is None else proxies.detach().float().cpu().numpy()
    return score_split(embeddings, split, class_groups, proxy_array)


def score_split(
    embeddings: np.ndarray,
    split: EvalSplit,
    class_groups: np.ndarray | None = None,
    proxies: np.ndarray | None = None,
) -> dict[str, float]:
    """Recall@K, MAP@R and R-precision of a split's `(N, D)` embeddings, and per-group results where they apply.

    On closed-set splits (`split.train_class` known and some classes trained) and with `class_groups`
    (`frequency_groups` of the training set), the result also holds `group_metrics`: Recall@1 and
    MAP@R per head / mid / tail group and, with `proxies` `(K, D)` of the same K classes, the proxy
    classifier's accuracy overall and per group.
    """
    kept = ~np.isnan(embeddings).any(axis=1)  # rows of images skipped under data.on_bad_image: skip
    embeddings, labels = embeddings[kept], split.labels[kept]
    query_mask, gallery_mask = (None if mask is None else mask[kept] for mask in (split.query_mask, split.gallery_mask))
    metrics = retrieval_metrics(embeddings, labels, KS, query_mask, gallery_mask)
    if class_groups is not None and split.train_class is not None:
        if proxies is not None and len(proxies) != len(class_groups):
            proxies = None  # proxies of other classes than this data's: no classifier to score
        metrics.update(
            group_metrics(embeddings, labels, split.train_class[kept], class_groups, query_mask, gallery_mask, proxies)
        )
    return metrics


def format_metrics(metrics: dict[str, float], label: str = "") -> str:
    """The closing lines of `train` and `evaluate`: `Recall@K: 0.xxxx` per K, then `MAP@R: 0.xxxx`.

    A `label` (e.g. "selected on test") is appended to every line, so no figure travels without it.
    """
    lines = []
    skipped = int(metrics.get("num_queries_without_positive", 0))
    if skipped:
        lines.append(f"note: {skipped} queries have no same-class image in the gallery and are left out")
    lines.append(closing_lines({key: f"{value:.4f}" for key, value in metrics.items()}, label))
    return "\n".join(lines)


def closing_lines(values: dict[str, str], label: str = "") -> str:
    """`Recall@K: <text>` per K, then `MAP@R: <text>`, from already formatted `values` keyed `recall@K`, `map@r`."""
    suffix = f"  ({label})" if label else ""
    names = [*((f"recall@{k}", f"Recall@{k}") for k in KS), ("map@r", "MAP@R")]
    return "\n".join(f"{name}: {values[key]}{suffix}" for key, name in names)
