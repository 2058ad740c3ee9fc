"""Embed a dataset and score retrieval on it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from contextlib import nullcontext

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from retrieval.data import EvalSplit
from retrieval.metrics import PerQuery, per_query_scores

__all__ = ["KS", "closing_lines", "embed_dataset", "evaluate_model", "format_mean_sd", "format_metrics", "score_model"]

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
    """`(N, D)` float32 embeddings of every item of `dataset`, in order."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
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
    return torch.cat(chunks).numpy()


def evaluate_model(
    model: nn.Module,
    split: EvalSplit,
    batch_size: int,
    device: torch.device,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
) -> dict[str, float]:
    """Recall@K, MAP@R and R-precision of `model` on one split (validation or test) with its protocol."""
    return score_model(model, split, batch_size, device, num_workers, amp_dtype, channels_last).summary(KS)


def score_model(
    model: nn.Module,
    split: EvalSplit,
    batch_size: int,
    device: torch.device,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
) -> PerQuery:
    """Every query's scores on one split; `.summary(KS)` gives `evaluate_model`'s metrics."""
    embeddings = embed_dataset(model, split.dataset, batch_size, device, num_workers, amp_dtype, channels_last)
    return per_query_scores(embeddings, split.labels, KS, split.query_mask, split.gallery_mask)


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


def format_mean_sd(scores: Sequence[float]) -> str:
    """`0.8123 ± 0.0045`: mean and sample standard deviation (0 for a single score) of one metric over seeds."""
    spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return f"{statistics.mean(scores):.4f} ± {spread:.4f}"
