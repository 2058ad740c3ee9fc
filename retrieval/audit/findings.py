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
from retrieval.audit.colour import recoloured_leaks
from retrieval.audit.duplicates import Groups, exact_duplicate_groups, near_duplicate_groups
from retrieval.audit.knn_graph import KnnGraph, build_knn_graph
from retrieval.audit.leaks import Leaks, copy_leaks
from retrieval.audit.scoring import Scores, score_issues
from retrieval.audit.threshold import NearThreshold, choose_threshold, group_warning
from retrieval.audit.trust import Selection, trust_warning
from retrieval.config import AUDIT_CHECKS, AuditConfig
from retrieval.core.match_threshold import MatchThreshold
from retrieval.validation import Record

__all__ = ["AuditSummary", "Findings", "audit_embeddings"]

_log = logging.getLogger(__name__)


class AuditSummary(Record):
    """An audit's `summary.json`: its settings and what each section found (None: the section cannot exist, or its
    check was not run: `left_out` says which)."""

    images: int
    k: int
    exact_graph: bool  # the k-NN graph is exact (not approximate)
    threshold: float | None  # the near-duplicate cosine
    threshold_source: str | None  # how it was chosen, one line
    exact_duplicate_groups: int | None  # None: files were not hashed
    near_duplicate_groups: int | None
    leak_ratio: float  # a leak's distance to its partner over the next earlier-split image's, at most
    leaked_rows: int | None  # None: no split column
    recoloured_leaks: int | None  # leaked rows whose partner differs only in colour (perhaps another item)
    test_nearest_neighbour_leak_share: float | None  # NaN: no test rows
    label_issues: int | None  # None: no labels
    outliers: int | None
    confused_class_pairs: int | None
    left_out: list[str]  # why each absent section is absent, said once
    warnings: list[str]  # findings not to act on as they stand (a near-duplicate group of much of the catalogue)


@dataclass(frozen=True)
class Findings:
    """Everything an audit found about a catalogue, row-aligned with it."""

    catalogue: Catalogue
    settings: AuditConfig
    graph: KnnGraph
    exact: Groups | None  # None when files were not hashed
    threshold: NearThreshold | None  # the near-duplicate groups' cosine and how it was chosen (None: no such check)
    near: Groups | None
    leaks: Leaks | None  # None without a split column
    scores: Scores
    class_names: list[str]  # the label of class index c (empty without labels)
    selection: Selection | None = None  # the checkpoint's model-selection record, when it has one
    recoloured: np.ndarray | None = None  # (N,) bool: leaked rows whose partner differs in colour (None: no leaks)

    def ran(self, check: str) -> bool:
        """Whether `check` (one of `retrieval.config.AUDIT_CHECKS`) was asked for."""
        return check in self.settings.checks

    def warnings(self) -> list[str]:
        """One line per finding not to act on as it stands."""
        warnings = []
        if self.near is not None and self.threshold is not None:
            warnings.append(group_warning(self.near, len(self.catalogue), self.threshold.score))
        if self.ran("label_issues") or self.ran("outliers"):
            warnings.append(trust_warning(self.selection))
        return [warning for warning in warnings if warning is not None]

    def summary(self) -> AuditSummary:
        """The counts and settings of the report's summary.json and the command's last lines."""
        scores, threshold, near = self.scores, self.threshold, self.near
        issues = scores.is_label_issue if self.ran("label_issues") else None
        not_run = [check for check in AUDIT_CHECKS if not self.ran(check)]
        return AuditSummary.model_validate(
            {
                "images": len(self.catalogue),
                "k": self.graph.k,
                "exact_graph": self.graph.exact,
                "threshold": None if threshold is None else threshold.score,
                "threshold_source": None if threshold is None else threshold.source,
                "exact_duplicate_groups": None if self.exact is None else self.exact.count,
                "near_duplicate_groups": None if near is None else near.count,
                "leak_ratio": self.settings.leak_ratio,
                "leaked_rows": None if self.leaks is None else int(self.leaks.leaked.sum()),
                "recoloured_leaks": None if self.recoloured is None else int(self.recoloured.sum()),
                "test_nearest_neighbour_leak_share": None if self.leaks is None else self.leaks.nearest_leak_share,
                "label_issues": None if issues is None else int(issues.sum()),
                "outliers": int(scores.is_outlier.sum()) if self.ran("outliers") else None,
                "confused_class_pairs": len(scores.class_pairs) if self.ran("confused_classes") else None,
                "left_out": [
                    *self.catalogue.missing,
                    *([f"checks not run (audit.checks): {', '.join(not_run)}"] if not_run else []),
                ],
                "warnings": self.warnings(),
            }
        )


def audit_embeddings(
    embeddings: np.ndarray,
    catalogue: Catalogue,
    settings: AuditConfig,
    progress: bool = True,
    stored: MatchThreshold | None = None,
    selection: Selection | None = None,
) -> Findings:
    """Every finding about `catalogue` from its `(N, D)` unit embeddings (N >= 2).

    `stored` is the model's match threshold: the near-duplicate threshold where the catalogue has no
    labels to choose one on; `selection` its model-selection record, which says whether label issues
    and outliers can be trusted (`retrieval.audit.trust`).

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
    exact = exact_duplicate_groups(catalogue.paths, progress) if "exact_duplicates" in settings.checks else None
    threshold, near = None, None
    if "near_duplicates" in settings.checks:
        threshold = choose_threshold(
            embeddings, catalogue, settings.threshold, settings.threshold_fmr, settings.threshold_floor, stored
        )
        near = near_duplicate_groups(graph, threshold.score)
    leaks, recoloured = None, None
    if catalogue.splits is not None and "leaks" in settings.checks:
        leaks = copy_leaks(catalogue.paths, catalogue.splits, graph.neighbours[:, 0], settings.leak_ratio, progress)
        recoloured = recoloured_leaks(catalogue.paths, leaks)
    _log.info("scoring label issues and outliers with cleanlab")
    codes, class_names = (None, []) if catalogue.labels is None else catalogue.label_codes()
    scores = score_issues(graph, embeddings, codes, len(class_names))
    return Findings(
        catalogue, settings, graph, exact, threshold, near, leaks, scores, class_names, selection, recoloured
    )
