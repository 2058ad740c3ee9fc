"""The near-duplicate threshold: chosen on the catalogue's own different-label pairs, unless given.

A fixed cosine does not fit every embedding: a weakly trained one packs a whole catalogue above
0.95 (issue 49: 374 of 387 images in one group). So the threshold is chosen as the match threshold
is (`retrieval.metrics.verification.threshold_at_fmr`, the machinery of `evaluate --verification`):
the lowest cosine at which at most `fmr` of the catalogue's different-label pairs match, raised to
`floor` where it lies below it (on well-separated category data the different-label pairs allow
whole classes; a copy stays above the floor). Without two labelled classes and a pair of one class
there is nothing to choose on: the model's stored match threshold, else the floor.
A near-duplicate group holding more than `GROUP_SHARE` of the catalogue (and more than
`GROUP_MIN` images) is named in one warning: acting on it would drop that much of the catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.duplicates import Groups
from retrieval.core.match_threshold import MatchThreshold
from retrieval.metrics.verification import fmr_text, pairs_of, threshold_at_fmr

__all__ = ["GROUP_MIN", "GROUP_SHARE", "NearThreshold", "choose_threshold", "group_warning"]

GROUP_SHARE = 0.05  # a near-duplicate group above this share of the catalogue is warned about
GROUP_MIN = 10  # ... when it also holds more than this many images (a pair in 30 images is no alarm)
_ROUGH_FALSE_MATCHES = 10  # a rate allowing fewer different-label pairs than this is said to be rough


@dataclass(frozen=True)
class NearThreshold:
    """The near-duplicate cosine and one line saying how it was chosen."""

    score: float
    source: str


def choose_threshold(
    embeddings: np.ndarray,
    catalogue: Catalogue,
    given: float | None,
    fmr: float,
    floor: float,
    stored: MatchThreshold | None = None,
) -> NearThreshold:
    """`given` when set, else chosen at `fmr` on the catalogue's different-label pairs (at least `floor`).

    Args:
        embeddings: `(N, D)` unit embeddings, row-aligned with `catalogue`.
        catalogue: its labels choose the threshold (none, or a single class: `stored`, else `floor`).
        given: the user's threshold (the override).
        fmr: the share of different-label pairs allowed to score at or above the threshold, in (0, 1).
        floor: the lowest threshold chosen.
        stored: the model's match threshold, used only when the catalogue cannot choose one.
    """
    if given is not None:
        return NearThreshold(given, "given (audit.threshold)")
    codes = None if catalogue.labels is None else catalogue.label_codes()[0]
    if codes is None or len(np.unique(codes)) < 2 or np.bincount(codes).max() < 2:
        reason = "no labels" if codes is None else "fewer than two classes or no two images of one class"
        if stored is not None:
            split = stored.chosen_on or "val"
            return NearThreshold(
                stored.score,
                f"the model's match threshold (FMR {stored.target_fmr}, chosen on {split}): {reason} to choose on",
            )
        return NearThreshold(floor, f"the floor audit.threshold_floor: {reason} to choose on")
    pairs = pairs_of(embeddings, codes)
    point = threshold_at_fmr(pairs, fmr)
    impostors = pairs.num_impostor
    sampled = f" (a sample of {pairs.total:,} pairs)" if pairs.sampled else ""
    allowed = fmr * impostors
    rough = f"; rough: the rate allows {allowed:.1f} of them" if allowed < _ROUGH_FALSE_MATCHES else ""
    chosen = (
        f"FMR {fmr_text(fmr)} on the catalogue's {impostors:,} different-label pairs{sampled}: "
        f"{round(point.fmr * impostors):,} of them score at or above {point.threshold:.4f}{rough}"
    )
    if point.threshold < floor:
        return NearThreshold(floor, f"the floor audit.threshold_floor, above {chosen}")
    return NearThreshold(point.threshold, f"chosen at {chosen}")


def group_warning(near: Groups, images: int, threshold: float) -> str | None:
    """One line when the largest near-duplicate group holds more than `GROUP_SHARE` of `images`, else None."""
    if near.count == 0:
        return None
    size = int(np.bincount(near.group[near.group >= 0]).max())
    if size <= max(GROUP_SHARE * images, GROUP_MIN):
        return None
    return (
        f"warning: one near-duplicate group holds {size:,} of the {images:,} images ({size / images:.0%}); the "
        f"threshold {threshold:.4f} does not fit this embedding: raise it (--set audit.threshold=...) before "
        "excluding near_duplicates.csv"
    )
