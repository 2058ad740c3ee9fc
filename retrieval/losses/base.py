"""`MetricLoss`: the one interface the trainer and the proxy classifier use to talk to a loss.

Every loss of `retrieval.losses.LOSSES` derives from it, so code outside this package reads
these members directly and never probes a loss with `getattr` / `hasattr`.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

from torch import Tensor, nn

from retrieval.losses.functional.pair import reference_labels

__all__ = ["MetricLoss", "PairLoss", "PairMemory"]


class MetricLoss(nn.Module):
    """A loss on raw embeddings `(B, D)` and labels `(B,)` (multi-hot `(B, K)` when `multi_label`) -> a scalar.

    Subclasses implement `forward` and say what they hold with the members below; the defaults fit
    a loss without proxies, scale or epoch-dependent behaviour.

    Attributes:
        multi_label: `forward` takes `(B, K)` multi-hot targets (multi-label data trains only with such a loss).
        needs_pk_batches: the loss compares the images of a batch with each other (pair losses), so it
            trains only on P classes x K images batches (`retrieval.data.PKSampler`); under several
            processes the trainer gathers the global batch for it.
        proxies: `(K, D)` learnable class proxies, or None. Declared here, set by each subclass: a
            proxy loss registers an `nn.Parameter` under this name (its state-dict key), a pair loss
            sets None.
        check_labels: check the label range on every call (True). On a GPU the check reads the labels
            back, one host-device sync per step; the trainer checks its dataset once and turns it off.
            Losses without proxies have no range to check and ignore it.
        last_stats: detached tensors of the last call for logging and diagnostics (per-sample `(B,)`
            statistics such as `scale`, `c`, `b`, `w`; `logits` `(B, K)` and `labels` for the
            gradient diagnostics; scalar counts); empty when the loss has none.
    """

    multi_label: ClassVar[bool] = False
    needs_pk_batches: ClassVar[bool] = False
    proxies: Tensor | None

    def __init__(self) -> None:
        super().__init__()
        self.check_labels = True
        self.last_stats: dict[str, Tensor] = {}

    @property
    def logit_scale(self) -> float:
        """The base scale s of the logits `s * cos(f, P)` a proxy classifier uses: 1.0 unless the loss has one.

        A fixed-scale loss returns its scale, the Anchor Loss its gamma (its per-sample `c_i` needs
        the true class, unknown at test time).
        """
        return 1.0

    def set_epoch(self, epoch: int) -> None:
        """Told the 0-based epoch about to be trained (e.g. a gate's warm-up); nothing by default."""


class PairMemory(NamedTuple):
    """Embeddings of earlier batches `(M, D)`, detached, and their class ids `(M,)` (`CrossBatchMemory`)."""

    embeddings: Tensor
    labels: Tensor


class PairLoss(MetricLoss):
    """A loss over the pairs of a P x K batch, whose references may extend to a memory of earlier batches.

    The one `forward` of every pair loss (ours and PML's): subclasses implement `pair_loss`, which
    sees the memory (or None) checked and bundled.
    """

    needs_pk_batches: ClassVar[bool] = True
    proxies = None

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        memory_embeddings: Tensor | None = None,
        memory_labels: Tensor | None = None,
    ) -> Tensor:
        """Loss of one batch: each anchor against the rest of the batch and, when given, a memory of earlier batches.

        Args:
            embeddings: raw embeddings (B, D); normalized by the loss, computed in float32.
            labels: class ids (B,).
            memory_embeddings: raw embeddings of earlier batches (M, D), detached, or None
                (`retrieval.losses.CrossBatchMemory` passes them).
            memory_labels: their class ids (M,), or None.

        Returns:
            Scalar loss; 0 (still backpropagating) when the batch has nothing to compare.

        Raises:
            ValueError: if only one of `memory_embeddings` and `memory_labels` is given, or their lengths differ.
        """
        reference_labels(labels, memory_embeddings, memory_labels)  # checks that they come together
        memory = (
            None if memory_embeddings is None or memory_labels is None else PairMemory(memory_embeddings, memory_labels)
        )
        return self.pair_loss(embeddings, labels, memory)

    def pair_loss(self, embeddings: Tensor, labels: Tensor, memory: PairMemory | None) -> Tensor:
        """The loss of `forward`, with the memory checked (None: the batch alone)."""
        raise NotImplementedError(f"{type(self).__name__} must implement pair_loss")
