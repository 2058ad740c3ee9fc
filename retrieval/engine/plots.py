"""PNG plots of a run: training curves and the per-sample scale diagnostics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["plot_curves", "plot_histogram"]


def plot_curves(records: list[dict[str, Any]], path: Path) -> None:
    """Loss, learning rate and validation (and logged test) Recall@1 / MAP@R against the epoch."""
    epochs = [r["epoch"] for r in records]
    fig, (ax_loss, ax_lr, ax_recall) = plt.subplots(1, 3, figsize=(15, 4))
    ax_loss.plot(epochs, [r["loss"] for r in records], marker="o")
    ax_loss.set(title="training loss", xlabel="epoch")
    ax_lr.plot(epochs, [r["lr"] for r in records], marker="o")
    ax_lr.set(title="learning rate (end of epoch)", xlabel="epoch")
    for split, style in (("val", "-"), ("test", ":")):
        evaluated = [r for r in records if f"{split}/recall@1" in r]
        for metric in ("recall@1", "map@r") if evaluated else ():
            values = [r[f"{split}/{metric}"] for r in evaluated]
            ax_recall.plot([r["epoch"] for r in evaluated], values, style, marker="o", label=f"{split} {metric}")
    ax_recall.set(title="retrieval (val selects; test only when asked)", xlabel="epoch", ylim=(0, 1))
    if ax_recall.lines:
        ax_recall.legend(loc="lower right")
    for ax in (ax_loss, ax_lr, ax_recall):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_histogram(values: np.ndarray, path: Path, title: str) -> None:
    """Histogram of per-sample values of the last epoch (e.g. the semantic difficulty c_i)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(values, bins=50)
    median, p90 = np.quantile(values, [0.5, 0.9])
    ax.axvline(median, color="k", linestyle="--", label=f"median {median:.3f}")
    ax.axvline(p90, color="r", linestyle=":", label=f"p90 {p90:.3f}")
    ax.set(title=title, ylabel="samples")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
