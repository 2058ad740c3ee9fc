"""Pictures of the proxy classifier: one-vs-rest PR curves, confusion matrices, reliability diagram."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from retrieval.metrics.classification import CalibrationSummary, ClassificationReport
from retrieval.report.plots import save_figure

__all__ = ["plot_classification"]

_ANNOTATE_UP_TO = 20  # classes; beyond this the confusion cells carry no numbers


def plot_classification(
    report: ClassificationReport, out_dir: Path, calibrated: CalibrationSummary | None = None
) -> list[Path]:
    """Write `pr_curves.png`, `confusion.png` (when the report has it) and `reliability.png` into `out_dir`.

    Args:
        report: `classification_report` of the test images.
        out_dir: an existing directory.
        calibrated: `calibration_summary` after temperature scaling, drawn beside the raw diagram.
    """
    written = [_pr_curves(report, out_dir / "pr_curves.png")]
    if report.confusion is not None:
        written.append(_confusion(report, out_dir / "confusion.png"))
    written.append(_reliability(report, calibrated, out_dir / "reliability.png"))
    return written


def _pr_curves(report: ClassificationReport, path: Path) -> Path:
    fig = Figure(figsize=(6, 5))
    ax = fig.subplots()
    for k, curve in enumerate(report.pr_curves or []):
        if curve is not None:
            ax.plot(
                curve.recall,
                curve.precision,
                lw=1,
                alpha=0.7,
                label=f"class {k} (AP {report.average_precision[k]:.3f})",
            )
    micro = report.pr_micro
    ax.plot(
        micro.recall,
        micro.precision,
        "k",
        lw=2.5,
        label=f"micro-average curve (mean AP {report.mean_average_precision:.3f})",
    )
    ax.set(
        title="proxy classifier, one-vs-rest precision-recall",
        xlabel="recall",
        ylabel="precision",
        xlim=(0, 1),
        ylim=(0, 1.02),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="lower left", ncol=2)
    return save_figure(fig, path)


def _confusion(report: ClassificationReport, path: Path) -> Path:
    counts = np.asarray(report.confusion)
    normalized = np.asarray(report.confusion_normalized)
    fig = Figure(figsize=(12, 5))
    axes = fig.subplots(1, 2)
    for ax, matrix, title, fmt in ((axes[0], counts, "counts", "d"), (axes[1], normalized, "row-normalized", ".2f")):
        image = ax.imshow(matrix, cmap="Blues")
        fig.colorbar(image, ax=ax, fraction=0.046)
        ax.set(title=f"confusion matrix ({title})", xlabel="predicted class", ylabel="true class")
        if len(matrix) <= _ANNOTATE_UP_TO:
            ax.set(xticks=range(len(matrix)), yticks=range(len(matrix)))
            threshold = matrix.max() / 2
            for (i, j), value in np.ndenumerate(matrix):
                colour = "white" if value > threshold else "black"
                ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=6, color=colour)
    return save_figure(fig, path)


def _reliability(report: CalibrationSummary, calibrated: CalibrationSummary | None, path: Path) -> Path:
    panels = [("raw softmax", report), *([("temperature-scaled", calibrated)] if calibrated else [])]
    fig = Figure(figsize=(5.5 * len(panels), 5))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (name, summary) in zip(axes[0], panels, strict=True):
        bins = summary.reliability
        edges = np.asarray(bins.edges)
        accuracy = np.nan_to_num(np.asarray(bins.accuracy, dtype=float))
        confidence = np.asarray(bins.confidence, dtype=float)
        ax.bar(edges[:-1], accuracy, width=np.diff(edges), align="edge", edgecolor="k", alpha=0.7, label="accuracy")
        ax.plot(confidence, confidence, "r.", label="mean confidence")
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
        ax.set(
            title=f"{name}: ECE {summary.ece:.4f}, Brier {summary.brier:.4f}",
            xlabel="confidence (top-label probability)",
            ylabel="accuracy",
            xlim=(0, 1),
            ylim=(0, 1),
        )
        ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path)
