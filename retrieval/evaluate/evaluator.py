"""Embed a dataset and score retrieval on it.

Embedding goes through `retrieval.inference.forward`, the path `retrieval embed`, `index` and
`serve` share, so the embeddings scored here are the ones an index of the same checkpoint stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from retrieval.core.learned_rerank import RowReranker
from retrieval.core.rerank import Reranker
from retrieval.data import EvalSplit, ImageLoader
from retrieval.errors import UserError
from retrieval.inference.forward import Precision, embed_loader
from retrieval.metrics import PerQuery, group_metrics, per_query_scores
from retrieval.runtime.distributed import DistributedContext, gather_rows, shard_range

if TYPE_CHECKING:
    from retrieval.config import DataConfig

__all__ = [
    "KS",
    "SplitEvaluator",
    "closing_lines",
    "embed_dataset",
    "evaluate_model",
    "format_metrics",
    "readable_rows",
    "score_split",
]

KS = (1, 2, 4, 8)


def _embed_all(
    model: nn.Module, loader: DataLoader, device: torch.device, precision: Precision, progress: bool = True
) -> np.ndarray:
    """`embed_loader`, refusing a split whose every image was skipped under `data.on_bad_image: skip`."""
    embeddings = embed_loader(model, loader, device, precision, progress)
    skipped = getattr(loader, "skipped_indices", [])
    if skipped and len(skipped) == len(embeddings):
        raise UserError(f"none of the {len(skipped)} images could be read (data.on_bad_image=skip skipped them all)")
    return embeddings


def embed_dataset(
    model: nn.Module,
    dataset: Dataset,
    batch_size: int,
    device: torch.device,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
    pin_memory: bool = False,
) -> np.ndarray:
    """`(N, D)` float32 embeddings of every item of `dataset`, in order.

    The rows of images left out under `data.on_bad_image: skip` are NaN (`score_split` drops them).
    """
    loader = ImageLoader(dataset, batch_size=batch_size, num_workers=num_workers, pin_memory=pin_memory)
    return _embed_all(model, loader, device, Precision(amp_dtype, channels_last))


def embed_as_configured(
    model: nn.Module, dataset: Dataset, data: DataConfig, device: torch.device, precision: Precision
) -> np.ndarray:
    """`embed_dataset` with a run's settings: its eval batch size and workers, its precision, pinned memory on CUDA."""
    return embed_dataset(
        model,
        dataset,
        data.eval_batch_size,
        device,
        num_workers=data.num_workers,
        amp_dtype=precision.amp_dtype,
        channels_last=precision.channels_last,
        pin_memory=data.pin_memory and device.type == "cuda",
    )


def evaluate_model(
    model: nn.Module,
    split: EvalSplit,
    batch_size: int,
    device: torch.device,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
    pin_memory: bool = False,
    class_groups: np.ndarray | None = None,
    proxies: torch.Tensor | None = None,
) -> dict[str, float]:
    """Recall@K, MAP@R and R-precision of `model` on one split (validation or test) with its protocol.

    One call of a single-process `SplitEvaluator`: with `class_groups` and `proxies`, closed-set
    splits get the per-group results of `score_split`.
    """
    evaluator = SplitEvaluator(
        split,
        batch_size,
        device,
        num_workers=num_workers,
        pin_memory=pin_memory,
        amp_dtype=amp_dtype,
        channels_last=channels_last,
        class_groups=class_groups,
    )
    return evaluator(model, proxies)


def readable_rows(embeddings: np.ndarray) -> np.ndarray:
    """`(N,)` bool: the rows `score_split` scores (images skipped under `data.on_bad_image: skip` are NaN rows).

    A `RowReranker`'s rows are the positions among these.
    """
    return ~np.isnan(embeddings).any(axis=1)


def score_split(
    embeddings: np.ndarray,
    split: EvalSplit,
    class_groups: np.ndarray | None = None,
    proxies: np.ndarray | None = None,
    rerank: Reranker | RowReranker | None = None,
) -> tuple[dict[str, float], PerQuery]:
    """Recall@K, MAP@R and R-precision of a split's `(N, D)` embeddings, and per-group results where they apply.

    Returns the metrics and every query's scores (`PerQuery`, for bootstrap intervals and `compare`).

    On closed-set splits (`split.train_class` known and some classes trained) and with `class_groups`
    (`frequency_groups` of the training set), the result also holds `group_metrics`: Recall@1 and
    MAP@R per head / mid / tail group and, with `proxies` `(K, D)` of the same K classes, the proxy
    classifier's accuracy overall and per group.
    """
    kept = readable_rows(embeddings)
    embeddings, labels = embeddings[kept], split.labels[kept]
    query_mask, gallery_mask = (None if mask is None else mask[kept] for mask in (split.query_mask, split.gallery_mask))
    scores = per_query_scores(embeddings, labels, KS, query_mask, gallery_mask, rerank)
    metrics = scores.summary(KS)
    if class_groups is not None and split.train_class is not None:
        if proxies is not None and len(proxies) != len(class_groups):
            proxies = None  # proxies of other classes than this data's: no classifier to score
        metrics.update(
            group_metrics(embeddings, labels, split.train_class[kept], class_groups, query_mask, gallery_mask, proxies)
        )
    return metrics, scores


class SplitEvaluator:
    """Scores a model on one split, again and again during training, sharded over the processes.

    The loader is built once, so `persistent_workers` keeps its workers between evaluations. Each
    rank embeds its contiguous shard (`shard_range`); the shards are gathered in order, rank 0
    computes the metrics (one FAISS search, not one per rank) and sends them to every rank, so
    all ranks take the same model-selection decisions.

    Args:
        split: the split and its query/gallery protocol.
        batch_size: images per embedding batch on each rank.
        device: where the model runs.
        context: the process group (a single process by default).
        num_workers: DataLoader worker processes.
        pin_memory: page-locked batches (GPU only).
        persistent_workers: keep the workers alive between calls (with num_workers > 0).
        amp_dtype: autocast dtype of the forward pass.
        channels_last: feed NHWC batches.
        class_groups: `frequency_groups` of the training classes, for per-group results on closed-set splits.
    """

    def __init__(
        self,
        split: EvalSplit,
        batch_size: int,
        device: torch.device,
        context: DistributedContext | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        amp_dtype: torch.dtype | None = None,
        channels_last: bool = False,
        class_groups: np.ndarray | None = None,
    ) -> None:
        self.split = split
        self.class_groups = class_groups
        self.device = device
        self.context = context or DistributedContext()
        self.precision = Precision(amp_dtype, channels_last)
        shard = shard_range(len(split.labels), self.context)  # labels: one row per item of split.dataset
        dataset = split.dataset if len(shard) == len(split.labels) else Subset(split.dataset, shard)
        self.loader = ImageLoader(
            dataset,
            batch_size=batch_size,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers and num_workers > 0,
        )

    def __call__(self, model: nn.Module, proxies: torch.Tensor | None = None) -> dict[str, float]:
        """The split's metrics (identical on every rank); with `proxies`, the proxy classifier's per group too."""
        return self.score(model, proxies)[0]

    def score(self, model: nn.Module, proxies: torch.Tensor | None = None) -> tuple[dict[str, float], PerQuery | None]:
        """The metrics (on every rank) and every query's scores (on rank 0, None elsewhere)."""
        local = _embed_all(model, self.loader, self.device, self.precision, self.context.is_main)
        embeddings = gather_rows(local, self.context, self.device)
        metrics, scores = None, None
        if self.context.is_main:
            metrics, scores = score_split(embeddings, self.split, self.class_groups, _as_array(proxies))
        return self.context.broadcast(metrics), scores


def _as_array(proxies: torch.Tensor | None) -> np.ndarray | None:
    return None if proxies is None else proxies.detach().float().cpu().numpy()


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
