"""Per-epoch training diagnostics from the loss's `last_stats`: cheap enough to leave on.

After each step the trainer hands the loss's `last_stats` to `EpochDiagnostics.update`; at the end
of the epoch `summary()` gives the loss's part of the epoch's `metrics.jsonl` record (`LossDiagnostics`).
Everything is accumulated on the training device without synchronizing (no `.item()`, no host
copies per step); the epoch's values reach the host once, in `summary()`. Nothing runs a second
backward pass: the gradient at the logits has a closed form.

What is recorded (each only when the loss provides the inputs):

- every per-sample statistic (`scale`, `c`, `b`, `w`, ...): min, p10, median, p90, max, mean;
- `c_hist`, `b_hist`: histograms on fixed bins, so epochs can be drawn side by side;
- `b_median`: median balance degree b_i per training-frequency group (head / mid / tail);
- `gating`: `fraction_gated` (share of samples with w_i < 1, i.e. down-weighted at all) and
  `fraction_zero` (w_i == 0, cut off entirely: all of the gated ones under CT gating);
- `grad`: the per-sample gradient norm at the logits summed per p_t bucket and per correct /
  wrong prediction, with the sample counts (needs `logits` and `labels`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import torch
from torch import Tensor

from retrieval.core.epoch_record import EpochRecord, Gating, GradientSums, Histogram, LossDiagnostics, Quantiles
from retrieval.metrics.groups import GROUP_NAMES

__all__ = [
    "B_RANGE",
    "C_RANGE",
    "HIST_BINS",
    "P_T_BUCKETS",
    "P_T_EDGES",
    "EpochDiagnostics",
    "describe_stats",
    "logit_gradient_norms",
]

P_T_EDGES = (0.2, 0.5, 0.8, 0.95)  # inner edges: buckets [0,.2) [.2,.5) [.5,.8) [.8,.95) [.95,1]
P_T_BUCKETS = ("[0,.2)", "[.2,.5)", "[.5,.8)", "[.8,.95)", "[.95,1]")
HIST_BINS = 40
C_RANGE = (1.0, 2.0)  # c_i lies in [1, 2] by construction
B_RANGE = (-8.0, 8.0)  # b = log(cos^2 / sin^2): +-8 is within 1 degree of the proxy / its orthogonal; clamped
_QUANTILES = {"min": 0.0, "p10": 0.1, "median": 0.5, "p90": 0.9, "max": 1.0}
_BATCH_KEYS = ("logits", "labels")  # (B, K) / (B,) inputs of the gradient diagnostics, not statistics


def logit_gradient_norms(logits: Tensor, labels: Tensor, weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-sample gradient norm at the logits of `mean_i w_i CE(z_i, y_i)`, and each sample's p_t.

    `d loss / d z_i = w_i (softmax(z_i) - onehot(y_i)) / B`, with the weights held constant (they
    are detached in every loss of the family), so no backward pass is needed.

    Args:
        logits: `(B, K)` logits as the loss saw them (after scale and margin).
        labels: `(B,)` target class indices.
        weights: optional `(B,)` per-sample weights w_i; None for 1.

    Returns:
        `(B,)` float32 gradient norms and `(B,)` float32 target probabilities p_t.
    """
    probabilities = torch.softmax(logits.detach().float(), dim=1)
    p_t = probabilities.gather(1, labels.view(-1, 1)).squeeze(1)
    # ||p - e_y||^2 = (1 - p_t)^2 + sum_{j != y} p_j^2, with 1 - p_t summed from the other classes: no
    # cancellation when p_t is close to 1, where float32 `1 - p_t` would round to a few ulps.
    others = probabilities.scatter(1, labels.view(-1, 1), 0.0)
    norms = torch.sqrt(others.sum(dim=1).square() + others.square().sum(dim=1)) / logits.shape[0]
    if weights is not None:
        norms = norms * weights.detach().float()
    return norms, p_t


class EpochDiagnostics:
    """Accumulates one epoch of `last_stats` on the device; `summary()` reads them out once.

    Args:
        class_groups: `(K,)` frequency group of each training class (`frequency_groups`), on the
            training device; None skips the per-group medians.
    """

    def __init__(self, class_groups: Tensor | None = None) -> None:
        self.class_groups = class_groups
        self._values: dict[str, list[Tensor]] = defaultdict(list)
        self._labels: list[Tensor] = []
        self._grad: Tensor | None = None  # (2, 7): row 0 sums, row 1 counts; 5 p_t buckets, then correct, wrong

    def update(self, stats: Mapping[str, Tensor]) -> None:
        """Take one step's `last_stats` (detached tensors; nothing is synchronized)."""
        logits, labels = stats.get("logits"), stats.get("labels")
        if labels is not None and labels.dim() != 1:  # multi-hot targets: no softmax gradient, no class groups
            logits = labels = None
        batch = None if labels is None else labels.shape[0]
        for key, value in stats.items():
            per_sample = value.dim() == 1 and (batch is None or value.shape[0] == batch)
            if key not in _BATCH_KEYS and (value.dim() == 0 or per_sample):
                self._values[key].append(value.detach().float().reshape(-1))
        if labels is not None:
            self._labels.append(labels.detach())
        if logits is not None and labels is not None:
            self._add_gradients(logits, labels, stats.get("w"))

    def _add_gradients(self, logits: Tensor, labels: Tensor, weights: Tensor | None) -> None:
        norms, p_t = logit_gradient_norms(logits, labels, weights)
        edges = torch.tensor(P_T_EDGES, device=p_t.device)
        bucket = torch.bucketize(p_t, edges, right=True)  # right=True: [a, b) intervals, p_t = 1 in the last
        wrong = (logits.detach().argmax(dim=1) != labels).long()
        slots = torch.cat([bucket, len(P_T_EDGES) + 1 + wrong])  # each sample once in each of the two splits
        if self._grad is None:
            self._grad = torch.zeros(2, len(P_T_BUCKETS) + 2, device=p_t.device)
        self._grad[0].index_add_(0, slots, torch.cat([norms, norms]))
        self._grad[1].index_add_(0, slots, torch.ones_like(slots, dtype=self._grad.dtype))

    def summary(self) -> LossDiagnostics:
        """The epoch's diagnostics, read back to the host once (see the module docstring for the keys)."""
        values = {key: torch.cat(chunks) for key, chunks in self._values.items()}
        statistics = {key: _quantiles(value) for key, value in values.items() if value.numel()}
        record = LossDiagnostics.model_validate(statistics)
        if "c" in values:
            record.c_hist = _histogram(values["c"], C_RANGE)
        if "b" in values:
            record.b_hist = _histogram(values["b"], B_RANGE)
            if self.class_groups is not None and self._labels:
                record.b_median = self._median_per_group(values["b"], torch.cat(self._labels))
        if "w" in values:
            weights = values["w"]
            record.gating = Gating(
                fraction_gated=float((weights < 1).float().mean()), fraction_zero=float((weights == 0).float().mean())
            )
        if self._grad is not None:
            sums, counts = self._grad.tolist()
            buckets = len(P_T_BUCKETS)
            record.grad = GradientSums(
                p_t_buckets=list(P_T_BUCKETS),  # the names the plots label the sums with
                p_t_sum=sums[:buckets],
                p_t_count=[int(n) for n in counts[:buckets]],
                correct_sum=sums[buckets],
                wrong_sum=sums[buckets + 1],
                correct_count=int(counts[buckets]),
                wrong_count=int(counts[buckets + 1]),
            )
        return record

    def _median_per_group(self, b: Tensor, labels: Tensor) -> dict[str, float]:
        if self.class_groups is None or b.shape != labels.shape:  # b for only some steps: no per-sample pairing
            return {}
        groups = self.class_groups[labels]
        return {
            name: float(b[groups == group].quantile(0.5))
            for group, name in enumerate(GROUP_NAMES)
            if bool((groups == group).any())
        }


def describe_stats(record: EpochRecord) -> str:
    """The part of an epoch's one-line summary the loss's statistics give: the median c_i, when recorded."""
    c = record.statistic("c")
    return f"  c_i median {c.median:.3f}" if c is not None else ""


def _quantiles(values: Tensor) -> Quantiles:
    """min / p10 / median / p90 / max (linear interpolation, as numpy) and mean of one epoch's values."""
    levels = torch.tensor(list(_QUANTILES.values()), device=values.device)
    quantiles = values.quantile(levels).tolist()
    return Quantiles(**dict(zip(_QUANTILES, quantiles, strict=True)), mean=float(values.mean()))


def _histogram(values: Tensor, value_range: tuple[float, float]) -> Histogram:
    """Counts on `HIST_BINS` equal bins over `value_range`; values outside are clamped into the end bins."""
    low, high = value_range
    counts = torch.histc(values.clamp(low, high), bins=HIST_BINS, min=low, max=high)
    return Histogram(range=(low, high), counts=[int(n) for n in counts.tolist()])
