"""PNG plots of a run, drawn from its `metrics.jsonl`: curves and the per-epoch training diagnostics.

`plot_run(run_dir)` writes into `run_dir/plots/`:

- `curves.png`: training loss, learning rate, Recall@K and MAP@R (validation; test when logged),
  and Recall@1 / proxy accuracy per training-frequency group when the split is closed-set;
- `difficulty.png`: the semantic difficulty c_i per epoch (histogram heat map, quantile bands);
- `gating.png`: the balance degree b_i per epoch (heat map, median per group, fraction gated);
- `gradients.png`: the share of the logit-gradient norm per p_t bucket and per correct / wrong
  prediction, per epoch.

Each diagnostic figure is drawn only when the run logged its inputs (see `train/diagnostics.py`).

Figures are drawn with matplotlib's object-oriented API (`Figure`, no pyplot): it needs no GUI
backend, so importing or calling this module never changes the caller's matplotlib backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from retrieval.core.epoch_record import METRICS_FILE, EpochRecord, Histogram
from retrieval.metrics.groups import GROUP_NAMES
from retrieval.runtime.files import atomic_write

__all__ = [
    "plot_curves",
    "plot_difficulty",
    "plot_gating",
    "plot_gradients",
    "plot_run",
    "read_records",
    "save_figure",
]

_Records = Sequence[EpochRecord]


def read_records(run_dir: Path) -> list[EpochRecord]:
    """The epoch records of a run's `metrics.jsonl`, in order.

    Raises:
        UserError: when the directory has no `metrics.jsonl` (not a run directory), or a line is not a record.
    """
    return EpochRecord.read(Path(run_dir) / METRICS_FILE)


def plot_run(run_dir: Path) -> list[Path]:
    """Draw every figure the run's records allow into `run_dir/plots/`; returns the files written."""
    records = read_records(run_dir)
    out = Path(run_dir) / "plots"
    out.mkdir(exist_ok=True)
    written = [plot_curves(records, out / "curves.png")]
    for key, name, draw in (("c", "difficulty", plot_difficulty), ("b", "gating", plot_gating)):
        if any(r.statistic(key) is not None for r in records):
            written.append(draw(records, out / f"{name}.png"))
    if any(r.grad is not None for r in records):
        written.append(plot_gradients(records, out / "gradients.png"))
    return written


def plot_curves(records: _Records, path: Path) -> Path:
    """Loss, learning rate, Recall@K / MAP@R, and (closed-set splits) results per frequency group."""
    epochs = [r.epoch for r in records]
    grouped = any(
        r.score(f"{split}/{GROUP_NAMES[0]}/recall@1") is not None for r in records for split in ("val", "test")
    )
    fig = Figure(figsize=(20 if grouped else 15, 4))
    axes = fig.subplots(1, 4 if grouped else 3)
    ax_loss, ax_lr, ax_recall = axes[:3]
    ax_loss.plot(epochs, [r.loss for r in records], marker="o")
    ax_loss.set(title="training loss", xlabel="epoch")
    ax_lr.plot(epochs, [r.lr for r in records], marker="o")
    ax_lr.set(title="learning rate (end of epoch)", xlabel="epoch")
    for split, style in (("val", "-"), ("test", ":")):
        metrics = sorted({key.split("/", 1)[1] for r in records for key in r.scores if _is_overall_metric(key, split)})
        for metric in metrics:
            _plot_key(ax_recall, records, f"{split}/{metric}", style, f"{split} {metric}")
    ax_recall.set(title="retrieval (val selects; test only when asked)", xlabel="epoch", ylim=(0, 1))
    if grouped:
        for split, style in (("val", "-"), ("test", ":")):
            for group, name in enumerate(GROUP_NAMES):  # one colour per group; R@1 solid, proxy accuracy dashed
                colour = f"C{group}"
                _plot_key(axes[3], records, f"{split}/{name}/recall@1", style, f"{split} {name} R@1", color=colour)
                label = f"{split} {name} proxy acc"
                _plot_key(axes[3], records, f"{split}/{name}/proxy_accuracy", "--", label, color=colour, alpha=0.6)
        axes[3].set(title="per training-frequency group", xlabel="epoch", ylim=(0, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.lines and ax is not ax_loss and ax is not ax_lr:
            ax.legend(loc="lower right", fontsize=7)
    return save_figure(fig, path)


def plot_difficulty(records: _Records, path: Path) -> Path:
    """c_i over epochs: histogram heat map and min / p10-p90 / median / max bands."""
    fig = Figure(figsize=(12, 4))
    ax_map, ax_band = fig.subplots(1, 2)
    _heat_map(ax_map, records, "c_hist", "semantic difficulty c_i: share of samples per bin")
    _quantile_bands(ax_band, records, "c", "c_i quantiles (1 = no confusion; s_i = gamma * c_i)")
    return save_figure(fig, path)


def plot_gating(records: _Records, path: Path) -> Path:
    """b_i over epochs: histogram heat map, median per frequency group and the fraction gated."""
    fig = Figure(figsize=(12, 4))
    ax_map, ax_median = fig.subplots(1, 2)
    _heat_map(ax_map, records, "b_hist", "balance degree b_i: share of samples per bin")
    for name in GROUP_NAMES:
        _plot_key(ax_median, records, f"b_median/{name}", "-", f"median b_i, {name}")
    ax_median.set(title="balance degree per group, and gating", xlabel="epoch", ylabel="b_i")
    ax_median.grid(alpha=0.3)
    ax_gated = ax_median.twinx()
    _plot_key(ax_gated, records, "gating/fraction_gated", ":", "fraction gated (w < 1)", color="k")
    _plot_key(ax_gated, records, "gating/fraction_zero", "--", "fraction cut (w = 0)", color="gray")
    ax_gated.set(ylim=(0, 1), ylabel="fraction of samples")
    handles = [*ax_median.get_legend_handles_labels()[0], *ax_gated.get_legend_handles_labels()[0]]
    if handles:
        ax_median.legend(handles=handles, fontsize=7, loc="best")
    return save_figure(fig, path)


def plot_gradients(records: _Records, path: Path) -> Path:
    """Share of the summed logit-gradient norm per p_t bucket, and on correct vs wrong predictions."""
    grads = [(r.epoch, r.grad) for r in records if r.grad is not None]
    epochs = np.array([epoch for epoch, _ in grads])
    sums = np.array([grad.p_t_sum for _, grad in grads])
    shares = sums / np.maximum(sums.sum(axis=1, keepdims=True), 1e-30)
    fig = Figure(figsize=(12, 4))
    ax_buckets, ax_wrong = fig.subplots(1, 2)
    # Bucket names come from the record; a record without them gets numbered labels.
    buckets = grads[-1][1].p_t_buckets or [f"bucket {i + 1}" for i in range(shares.shape[1])]
    ax_buckets.stackplot(epochs, shares.T, labels=[f"p_t in {b}" for b in buckets], alpha=0.85)
    ax_buckets.set(title="share of gradient norm at the logits, per p_t", xlabel="epoch", ylim=(0, 1))
    ax_buckets.legend(fontsize=7, loc="upper right")
    wrong = np.array([grad.wrong_sum for _, grad in grads])
    correct = np.array([grad.correct_sum for _, grad in grads])
    total = np.maximum(wrong + correct, 1e-30)
    ax_wrong.plot(epochs, wrong / total, marker="o", label="gradient share of wrong predictions")
    counts = np.array([grad.wrong_count / max(1, grad.wrong_count + grad.correct_count) for _, grad in grads])
    ax_wrong.plot(epochs, counts, ":", marker="s", label="fraction of samples predicted wrong")
    ax_wrong.set(title="where the gradient goes", xlabel="epoch", ylim=(0, 1))
    ax_wrong.legend(fontsize=7)
    for ax in (ax_buckets, ax_wrong):
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _is_overall_metric(key: str, split: str) -> bool:
    """`split/recall@K` or `split/map@r` (not per group, not counts)."""
    if not key.startswith(f"{split}/"):
        return False
    metric = key[len(split) + 1 :]
    return metric == "map@r" or (metric.startswith("recall@") and "/" not in metric)


def _plot_key(ax: Axes, records: _Records, key: str, style: str, label: str, **kwargs: Any) -> None:
    points = [(r.epoch, v) for r in records if (v := r.score(key)) is not None]
    if points:
        x, y = zip(*points, strict=True)
        ax.plot(x, y, style, marker="o", markersize=3, label=label, **kwargs)


def _heat_map(ax: Axes, records: _Records, key: str, title: str) -> None:
    """Histograms of one statistic (`c_hist`, `b_hist`), one column per epoch, normalized per epoch."""
    rows = [(r.epoch, histogram) for r in records if isinstance(histogram := getattr(r, key), Histogram)]
    counts = np.array([histogram.counts for _, histogram in rows], dtype=float)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    low, high = rows[0][1].range
    epochs = [epoch for epoch, _ in rows]
    image = ax.imshow(
        shares.T,
        origin="lower",
        aspect="auto",
        cmap="viridis",
        extent=(epochs[0] - 0.5, epochs[-1] + 0.5, low, high),
        interpolation="nearest",
    )
    ax.figure.colorbar(image, ax=ax)
    occupied = np.flatnonzero(counts.sum(axis=0))  # zoom on the bins any epoch used (c_i rarely leaves [1, 1.3])
    width = (high - low) / counts.shape[1]
    ax.set(
        title=title,
        xlabel="epoch",
        ylim=(low + width * max(occupied[0] - 1, 0), low + width * min(occupied[-1] + 2, counts.shape[1])),
    )


def _quantile_bands(ax: Axes, records: _Records, key: str, title: str) -> None:
    rows = [(r.epoch, quantiles) for r in records if (quantiles := r.statistic(key)) is not None]
    epochs = [epoch for epoch, _ in rows]
    q = {name: [getattr(quantiles, name) for _, quantiles in rows] for name in ("min", "p10", "median", "p90", "max")}
    ax.fill_between(epochs, q["min"], q["max"], alpha=0.2, label="min-max")
    ax.fill_between(epochs, q["p10"], q["p90"], alpha=0.4, label="p10-p90")
    ax.plot(epochs, q["median"], marker="o", label="median")
    ax.set(title=title, xlabel="epoch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def save_figure(fig: Figure, path: Path, dpi: int = 100) -> Path:
    """Lay out `fig` and write it to `path` atomically, so a reader never sees half a PNG.

    The format follows `path`'s suffix (PNG without one): the temporary file beside it has none to go by.
    """
    for ax in fig.axes:
        if ax.get_xlabel() == "epoch":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    with atomic_write(path) as temporary:
        fig.savefig(temporary, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    return path
