"""Cross-batch memory: a pair loss that also compares each batch with the embeddings of earlier batches.

Wang et al., CVPR 2020, "Cross-Batch Memory for Embedding Learning" (XBM). Embeddings drift
slowly once training has settled, so the last M embeddings are still good negatives (and
positives): a batch of 32 on a small GPU meets M of them instead of 31.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from retrieval.losses.base import MetricLoss

__all__ = ["CrossBatchMemory", "EmbeddingQueue"]


class EmbeddingQueue(nn.Module):
    """A first-in first-out ring buffer of the last `size` embeddings and their labels, stored detached.

    The layout is pytorch-metric-learning's `CrossBatchMemory`: a batch is written at the slots
    `(position + i) % size`, overwriting the oldest entries once the buffer is full. The buffers
    (`embeddings`, `labels`, `total`) are part of the state dict, so a resumed run continues with
    the memory it had. The count is mirrored on the host: reading the memory never waits for a GPU.

    Args:
        size: number of embeddings kept, M.
        embedding_dim: their size, D.

    Raises:
        ValueError: if `size` or `embedding_dim` is below 1.
    """

    def __init__(self, size: int, embedding_dim: int) -> None:
        super().__init__()
        if size < 1 or embedding_dim < 1:
            raise ValueError(f"need a memory size >= 1 and embedding_dim >= 1, got {size} and {embedding_dim}")
        self.size = size
        self.embeddings: Tensor
        self.labels: Tensor
        self.total: Tensor
        self.register_buffer("embeddings", torch.zeros(size, embedding_dim))
        self.register_buffer("labels", torch.zeros(size, dtype=torch.long))
        self.register_buffer("total", torch.zeros((), dtype=torch.long))  # embeddings ever enqueued
        self._total = 0  # `total` on the host
        self.register_load_state_dict_post_hook(_sync_host_count)

    @property
    def position(self) -> int:
        """The slot the next embedding is written to."""
        return self._total % self.size

    @property
    def count(self) -> int:
        """How many slots hold an embedding (`size` once the buffer has wrapped)."""
        return min(self._total, self.size)

    # The count lives on the host and changes every step: a compiled training step calls these eagerly.
    @torch.compiler.disable
    def enqueue(self, embeddings: Tensor, labels: Tensor) -> None:
        """Store a batch `(B, D)`, `(B,)` (B <= size), detached, over the oldest entries.

        Raises:
            ValueError: if the batch is larger than the memory.
        """
        if len(embeddings) > self.size:
            raise ValueError(
                f"a batch of {len(embeddings)} does not fit a memory of {self.size}; set loss.memory_size to at "
                "least the batch size over all processes (data.p x data.k)"
            )
        slots = torch.arange(self.position, self.position + len(embeddings), device=self.embeddings.device) % self.size
        self.embeddings[slots] = embeddings.detach().to(self.embeddings.dtype)
        self.labels[slots] = labels.detach().to(self.labels.dtype)
        self._total += len(embeddings)
        self.total.fill_(self._total)

    @torch.compiler.disable
    def older(self, skip_newest: int) -> tuple[Tensor, Tensor]:
        """The stored embeddings `(M', D)` and labels `(M',)`, oldest first, without the `skip_newest` most recent."""
        oldest = (self.position - self.count) % self.size
        slots = (oldest + torch.arange(max(self.count - skip_newest, 0), device=self.embeddings.device)) % self.size
        return self.embeddings[slots], self.labels[slots]

    def extra_repr(self) -> str:
        return f"size={self.size}, embedding_dim={self.embeddings.shape[1]}"


def _sync_host_count(module: nn.Module, incompatible_keys: Any) -> None:
    """After `load_state_dict`: the host copy of the count follows the loaded `total` buffer."""
    if isinstance(module, EmbeddingQueue):
        module._total = int(module.total)


class CrossBatchMemory(MetricLoss):
    """A pair loss (Circle, triplet) whose anchors, the batch, also meet the last `memory_size` embeddings.

    Each step enqueues the batch, then calls the pair loss with references = the batch followed
    by the memory's older entries: the same references as pytorch-metric-learning's
    `CrossBatchMemory(loss, embedding_size, memory_size)`, so the loss values are equal. The
    gradient flows through the batch's own references too, as in the plain loss (PML detaches
    the whole reference set): with an empty memory the loss is exactly the in-batch loss, value and
    gradient. Under several processes the trainer gathers the global batch before this loss
    (`retrieval.train.step.GatheredLoss`), so every rank enqueues every rank's embeddings and
    the memories stay identical.

    Memory: the buffer (M, D) and a (B, B + M) similarity matrix per step.

    Args:
        loss: a pair loss (`needs_pk_batches`) taking `memory_embeddings` and `memory_labels`.
        embedding_dim: D, the embedding size.
        memory_size: M, embeddings kept; at least the global batch. XBM uses a few times the
            batch up to about half the training set.

    Raises:
        ValueError: if `loss` is not a pair loss or `memory_size` is below 1.

    Attributes:
        last_stats: the pair loss's, plus {"memory_filled": how many embeddings the memory holds}.
    """

    needs_pk_batches = True
    proxies = None

    def __init__(self, loss: MetricLoss, embedding_dim: int, memory_size: int) -> None:
        super().__init__()
        if not loss.needs_pk_batches:
            raise ValueError(
                f"memory_size applies to pair losses (needs_pk_batches), not {type(loss).__name__}: "
                "proxy losses already compare every sample with every class"
            )
        self.loss = loss
        self.queue = EmbeddingQueue(memory_size, embedding_dim)

    @property
    def memory_size(self) -> int:
        """M, the number of embeddings the memory keeps."""
        return self.queue.size

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of one batch `(B, D)`, `(B,)` against itself and the memory; then the memory holds the batch too.

        Raises:
            ValueError: if B exceeds the memory size.
        """
        self.queue.enqueue(embeddings, labels)
        memory_embeddings, memory_labels = self.queue.older(skip_newest=len(embeddings))
        loss: Tensor = self.loss(embeddings, labels, memory_embeddings, memory_labels)
        self.last_stats = {**self.loss.last_stats, "memory_filled": torch.tensor(self.queue.count)}
        return loss

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the pair loss."""
        self.loss.set_epoch(epoch)
