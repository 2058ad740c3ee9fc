"""The one image-to-embedding path: a model, a device and a precision turn image batches into embeddings.

Evaluation (`retrieval.evaluate.evaluator`), `retrieval embed`, `index build|add|query` and `serve`
(through `ImageEncoder`) all run the forward pass in `embed_batch`, with a `Precision` resolved
from the run's config by `Precision.for_run`, so one checkpoint gives the same embeddings in every
command on the same device.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from retrieval.config import TrainConfig
from retrieval.runtime.device import amp_dtype, uses_channels_last
from retrieval.runtime.heartbeat import with_progress

__all__ = ["FLOAT32", "Precision", "embed_batch", "embed_loader"]


@dataclass(frozen=True)
class Precision:
    """How the forward pass runs: the autocast dtype and the memory format of the input batches.

    The model must be in the same memory format (`retrieval.runtime.device.place_model`).
    """

    amp_dtype: torch.dtype | None = None  # autocast dtype; None: plain float32
    channels_last: bool = False  # NHWC batches (pays off on GPU tensor cores only)

    @classmethod
    def for_run(cls, train: TrainConfig, device: torch.device) -> Precision:
        """The run's `train.amp` and `train.channels_last` resolved for `device` (both off on the CPU by default)."""
        return cls(amp_dtype(train.amp, device), uses_channels_last(train.channels_last, device))

    def autocast(self, device: torch.device) -> AbstractContextManager[object]:
        """The autocast context of the forward pass on `device` (a no-op for float32)."""
        return torch.autocast(device.type, dtype=self.amp_dtype) if self.amp_dtype is not None else nullcontext()


FLOAT32 = Precision()


@torch.no_grad()
def embed_batch(model: nn.Module, images: Tensor, device: torch.device, precision: Precision = FLOAT32) -> Tensor:
    """`(B, C, H, W)` preprocessed images -> `(B, D)` float32 embeddings on `device` (the model's mode is kept)."""
    images = images.to(device, non_blocking=True)
    if precision.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    with precision.autocast(device):
        return model(images).float()


def embed_loader(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    precision: Precision = FLOAT32,
    progress: bool = True,
) -> np.ndarray:
    """`(N, D)` float32 embeddings of every `(images, labels)` batch of `loader`, in order, in eval mode.

    With `progress`, a bar on a terminal, else a `Heartbeat` line (INFO) every `HEARTBEAT_SECONDS`.

    Images an `ImageLoader` skipped (`loader.skipped_indices`) leave NaN rows, so row i is still
    item i of `loader.dataset`; when every image was skipped, every row is NaN.
    """
    was_training = model.training
    model.eval()
    chunks = [embed_batch(model, images, device, precision) for images, _ in with_progress(loader, "embed", progress)]
    model.train(was_training)
    dim = int(getattr(model, "embedding_dim", 0))
    embedded = torch.cat(chunks).cpu().numpy() if chunks else np.zeros((0, dim), dtype=np.float32)
    return _with_skipped_rows(embedded, loader.dataset, getattr(loader, "skipped_indices", []))


def _with_skipped_rows(embedded: np.ndarray, dataset: Dataset, skipped: list[int]) -> np.ndarray:
    """NaN rows put back where images were skipped, so row i is still item i of `dataset`.

    `skipped` holds positions in the underlying dataset; a `Subset` shard is contiguous, so its
    positions are offset by its first index.
    """
    if not skipped:
        return embedded
    offset = dataset.indices[0] if isinstance(dataset, Subset) else 0
    size = len(embedded) + len(skipped)
    embeddings = np.full((size, embedded.shape[1]), np.nan, dtype=np.float32)
    embeddings[np.setdiff1d(np.arange(size), np.asarray(skipped) - offset)] = embedded
    return embeddings
