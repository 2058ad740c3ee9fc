"""An audit from embeddings: the kNN graph, then every finding over it (`audit_embeddings`).

Independent of how the embeddings were made, so the planted-fault benchmark runs the same
pipeline on a trained model's, an untrained network's and raw pixels. The near-duplicate
threshold is the caller's, else chosen on the catalogue's own different-label pairs
(`retrieval.audit.threshold`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.duplicates import Groups, exact_duplicate_groups, near_duplicate_groups
from retrieval.audit.knn_graph import KnnGraph, build_knn_graph
from retrieval.audit.leaks import MAX_RATIO, Leaks, copy_leaks
from retrieval.audit.scoring import Scores, score_issues
from retrieval.audit.threshold import NearThreshold, choose_threshold, group_warning
from retrieval.core.match_threshold import MatchThreshold
from retrieval.validation import Record

__all__ = ["DEFAULT_FLOOR", "DEFAULT_FMR", "AuditSettings", "AuditSummary", "Findings", "audit_embeddings"]

# The lowest near-duplicate cosine chosen: a copy scores above it on item-level classes; on category data most
# pairs of a class pass a match threshold (docs/audit.md), so the floor keeps whole classes out of the groups.
DEFAULT_FLOOR = 0.95
DEFAULT_FMR = 1e-4  # share of the catalogue's different-label pairs allowed at or above the near-duplicate threshold

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditSettings:
    """How an audit runs: neighbours per image, the near-duplicate threshold and where it came from."""

    k: int = 10  # neighbours per image in the graph (cleanlab's label and outlier scores read them)
    threshold: float | None = None  # the near-duplicate cosine; None: chosen on the catalogue (`choose_threshold`)
    threshold_fmr: float = DEFAULT_FMR  # ... at this false match rate on its different-label pairs
    threshold_floor: float = DEFAULT_FLOOR  # ... and at least this cosine
    hash_files: bool = True  # look for identical files by sha256 (reads every file once more)
    leak_ratio: float = MAX_RATIO  # a cross-split pair is a copy at most this distance ratio (`leaks.find_leaks`)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        for name, cosine in (("threshold", self.threshold), ("threshold_floor", self.threshold_floor)):
            if cosine is not None and not -1.0 <= cosine <= 1.0:
                raise ValueError(f"{name} must be a cosine in [-1, 1], got {cosine}")
        if not 0.0 < self.threshold_fmr < 1.0:
            raise ValueError(f"threshold_fmr must be in (0, 1), got {self.threshold_fmr}")
        if not 0.0 <= self.leak_ratio < 1.0:
            raise ValueError(f"leak_ratio must be in [0, 1), got {self.leak_ratio}")


class AuditSummary(Record):
    """An audit's `summary.json`: its settings and what each section found (None: the section cannot exist)."""

    images: int
    k: int
    exact_graph: bool  # the k-NN graph is exact (not approximate)
    threshold: float  # the near-duplicate cosine
    threshold_source: str  # how it was chosen, one line
    exact_duplicate_groups: int | None  # None: files were not hashed
    near_duplicate_groups: int
    leak_ratio: float  # a leak's distance to its partner over the next earlier-split image's, at most
    leaked_rows: int | None  # None: no split column
    test_nearest_neighbour_leak_share: float | None  # NaN: no test rows
    label_issues: int | None  # None: no labels
    outliers: int
    confused_class_pairs: int
    left_out: list[str]  # why each absent section is absent, said once
    warnings: list[str]  # findings not to act on as they stand (a near-duplicate group of much of the catalogue)


@dataclass(frozen=True)
class Findings:
    """Everything an audit found about a catalogue, row-aligned with it."""

    catalogue: Catalogue
    settings: AuditSettings
    graph: KnnGraph
    exact: Groups | None  # None when files were not hashed
    threshold: NearThreshold  # the near-duplicate groups' cosine and how it was chosen
    near: Groups
    leaks: Leaks | None  # None without a split column
    scores: Scores
    class_names: list[str]  # the label of class index c (empty without labels)

    def warnings(self) -> list[str]:
        """One line per finding not to act on as it stands."""
        warning = group_warning(self.near, len(self.catalogue), self.threshold.score)
        return [] if warning is None else [warning]

    def summary(self) -> AuditSummary:
        """The counts and settings of the report's summary.json and the command's last lines."""
        scores = self.scores
        return AuditSummary.model_validate(
            {
                "images": len(self.catalogue),
                "k": self.graph.k,
                "exact_graph": self.graph.exact,
                "threshold": self.threshold.score,
                "threshold_source": self.threshold.source,
                "exact_duplicate_groups": None if self.exact is None else self.exact.count,
                "near_duplicate_groups": self.near.count,
                "leak_ratio": self.settings.leak_ratio,
                "leaked_rows": None if self.leaks is None else int(self.leaks.leaked.sum()),
                "test_nearest_neighbour_leak_share": None if self.leaks is None else self.leaks.nearest_leak_share,
                "label_issues": None if scores.is_label_issue is None else int(scores.is_label_issue.sum()),
                "outliers": int(scores.is_outlier.sum()),
                "confused_class_pairs": len(scores.class_pairs),
                "left_out": self.catalogue.missing,
                "warnings": self.warnings(),
            }
        )


def audit_embeddings(
    embeddings: np.ndarray,
    catalogue: Catalogue,
    settings: AuditSettings,
    progress: bool = True,
    stored: MatchThreshold | None = None,
) -> Findings:
    """Every finding about `catalogue` from its `(N, D)` unit embeddings (N >= 2).

    `stored` is the model's match threshold: the near-duplicate threshold where the catalogue has no
    labels to choose one on.

    Raises:
        ValueError: embeddings and catalogue of different lengths, or fewer than 2 images.
    """
    if len(embeddings) != len(catalogue):
        raise ValueError(f"{len(embeddings)} embeddings for {len(catalogue)} images")
    if len(catalogue) < 2:
        raise ValueError("an audit needs at least 2 images")
    k = min(settings.k, len(catalogue) - 1)
    _log.info("kNN graph of %d embeddings, k=%d", len(catalogue), k)
    graph = build_knn_graph(embeddings, k, progress)
    exact = exact_duplicate_groups(catalogue.paths, progress) if settings.hash_files else None
    threshold = choose_threshold(
        embeddings, catalogue, settings.threshold, settings.threshold_fmr, settings.threshold_floor, stored
    )
    near = near_duplicate_groups(graph, threshold.score)
    leaks = None
    if catalogue.splits is not None:
        leaks = copy_leaks(catalogue.paths, catalogue.splits, graph.neighbours[:, 0], settings.leak_ratio, progress)
    _log.info("scoring label issues and outliers with cleanlab")
    if catalogue.labels is None:
        return Findings(
            catalogue, settings, graph, exact, threshold, near, leaks, score_issues(graph, embeddings, None), []
        )
    codes, class_names = catalogue.label_codes()
    scores = score_issues(graph, embeddings, codes, len(class_names))
    return Findings(catalogue, settings, graph, exact, threshold, near, leaks, scores, class_names)
