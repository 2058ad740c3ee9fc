"""A picture of retrieval: queries with their top-5 results, framed green (same class) or red.

`retrieval evaluate --grid FILE.png` draws the worst-ranked queries by default (those whose first
same-class result comes latest), or a random sample with `--grid-queries random`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import faiss
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch import Tensor

from retrieval.data import EvalSplit
from retrieval.report.grid_modes import GRID_MODES
from retrieval.report.plots import save_figure

__all__ = ["RankedQueries", "display_image", "draw_query_grid", "rank_queries", "select_queries"]

TOP = 5  # results shown per query
_NAME_CHARS = 22  # longest class name a caption shows whole at the grid's column width
_DEPTH = 1024  # how deep the first same-class result is looked for; deeper ranks count as this depth


class RankedQueries(NamedTuple):
    """Queries that have a same-class gallery item, with their nearest results (row-aligned)."""

    rows: np.ndarray  # (Q,) dataset rows of the queries
    neighbors: np.ndarray  # (Q, TOP) dataset rows of the nearest gallery items, most similar first
    similarities: np.ndarray  # (Q, TOP) their inner products with the query
    first_hit: np.ndarray  # (Q,) 0-based rank of the first same-class result (capped at the search depth)


def rank_queries(embeddings: np.ndarray, split: EvalSplit, depth: int = _DEPTH) -> RankedQueries:
    """Search every query of `split` in its gallery (itself left out) with exact FAISS inner product.

    Args:
        embeddings: `(N, D)` L2-normalized embeddings of the split, in dataset order.
        split: the split, with its query / gallery protocol.
        depth: how many results are searched to find the first same-class one.
    """
    count = len(split.labels)
    is_query = np.ones(count, bool) if split.query_mask is None else np.asarray(split.query_mask, bool)
    in_gallery = np.ones(count, bool) if split.gallery_mask is None else np.asarray(split.gallery_mask, bool)
    gallery_rows = np.flatnonzero(in_gallery)
    gallery_sizes = np.bincount(split.labels[in_gallery], minlength=split.labels.max() + 1)
    query_rows = np.flatnonzero(is_query & (gallery_sizes[split.labels] - in_gallery > 0))  # R >= 1
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(np.ascontiguousarray(embeddings[gallery_rows], dtype=np.float32))
    width = min(depth, len(gallery_rows) - 1) + 1  # one more, for the query itself
    similarities, found = index.search(np.ascontiguousarray(embeddings[query_rows], dtype=np.float32), width)
    neighbors = gallery_rows[found]
    is_self = neighbors == query_rows[:, None]
    is_self[~is_self.any(axis=1), -1] = True  # not found (or not in the gallery): drop the last instead
    keep = ~is_self
    neighbors = neighbors[keep].reshape(len(query_rows), -1)
    similarities = similarities[keep].reshape(len(query_rows), -1)
    hits = split.labels[neighbors] == split.labels[query_rows, None]
    first_hit = np.where(hits.any(axis=1), hits.argmax(axis=1), hits.shape[1])
    return RankedQueries(query_rows, neighbors[:, :TOP], similarities[:, :TOP], first_hit)


def select_queries(ranked: RankedQueries, count: int, mode: str, seed: int = 0) -> np.ndarray:
    """Positions in `ranked` of the queries to draw: the `count` worst-ranked, or `count` at random.

    Worst-ranked: the latest first same-class result; among ties, the higher top-1 similarity
    first (a confident mistake before a hesitant one).
    """
    count = min(count, len(ranked.rows))
    if mode == "random":
        return np.sort(np.random.default_rng(seed).choice(len(ranked.rows), size=count, replace=False))
    if mode != "worst":
        raise ValueError(f"grid mode must be one of {GRID_MODES}, got {mode!r}")
    order = np.lexsort((-ranked.similarities[:, 0], -ranked.first_hit))
    return order[:count]


def display_image(image: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """A normalized `(C, H, W)` model input back to an `(H, W, 3)` or `(H, W)` array in [0, 1] for drawing."""
    mean_t = torch.tensor(mean, dtype=image.dtype).view(-1, 1, 1)[: image.shape[0]]
    std_t = torch.tensor(std, dtype=image.dtype).view(-1, 1, 1)[: image.shape[0]]
    pixels = (image * std_t + mean_t).clamp(0, 1)
    return pixels[0].numpy() if pixels.shape[0] == 1 else pixels.permute(1, 2, 0).numpy()


def draw_query_grid(
    ranked: RankedQueries,
    chosen: np.ndarray,
    labels: np.ndarray,
    image_of: Callable[[int], np.ndarray],
    path: Path,
    title: str,
    class_names: Sequence[str] | None = None,
) -> Path:
    """One row per chosen query: the query, then its top-5 results framed green (same class) or red.

    Captions name each image's class and give each result's score (cosine) to 4 decimals, as
    `index query` prints them: near-ties that decide a rank stay visible.

    Args:
        ranked: the ranked queries.
        chosen: positions in `ranked` to draw.
        labels: `(N,)` class ids of the split, for the frames and captions.
        image_of: dataset row -> `(H, W[, 3])` image in [0, 1].
        path: the PNG to write.
        title: figure title (says how the queries were chosen).
        class_names: the dataset's own name of each class id (`class_names[id]`: the CSV label, folder
            or benchmark class); None: the ids themselves.
    """
    fig = Figure(figsize=(1.8 * (TOP + 1), 1.9 * len(chosen)))
    axes = fig.subplots(len(chosen), TOP + 1, squeeze=False)
    for axes_row, position in zip(axes, chosen, strict=True):
        query = ranked.rows[position]
        _show(
            axes_row[0],
            image_of(query),
            "black",
            f"query: {_class_name(labels[query], class_names)}\nfirst hit #{ranked.first_hit[position] + 1}",
        )
        for column, (row, similarity) in enumerate(
            zip(ranked.neighbors[position], ranked.similarities[position], strict=True)
        ):
            colour = "tab:green" if labels[row] == labels[query] else "tab:red"
            caption = f"{_class_name(labels[row], class_names)}\n{similarity:.4f}"
            _show(axes_row[column + 1], image_of(row), colour, caption)
        for ax in axes_row[1 + len(ranked.neighbors[position]) :]:
            ax.axis("off")
    fig.suptitle(title)
    return save_figure(fig, path, dpi=90)


def _class_name(label: int, class_names: Sequence[str] | None) -> str:
    """The caption's name of class id `label`, shortened with an ellipsis past `_NAME_CHARS`."""
    name = str(label) if class_names is None else str(class_names[int(label)])
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"


def _show(ax: Axes, image: np.ndarray, colour: str, caption: str) -> None:
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0, vmax=1)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_edgecolor(colour)
        spine.set_linewidth(4)
    ax.set_title(caption, fontsize=7)
