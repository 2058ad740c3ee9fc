"""`retrieval evaluate --verification`: match thresholds chosen on the validation split, applied once to test.

The honesty rule of model selection holds for thresholds too: each threshold is the lowest
whose false match rate on the validation split's pairs is at most the target, and the test
pairs are scored once, at that threshold, to report the FNMR and the FMR actually obtained.
Without a validation split, thresholds are chosen on the test split only with the opt-in that
model selection uses (`train.select_on_test`), and every line says so. A validation split is
used when there is one, even with that opt-in: nothing is gained by choosing on test then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from retrieval.core.match_threshold import MatchThreshold
from retrieval.data import EvalSplit, RetrievalData
from retrieval.errors import UserError
from retrieval.metrics.verification import (
    FMR_TARGETS,
    Pairs,
    fmr_text,
    pairs_of,
    rates_at,
    roc_auc,
    threshold_at_fmr,
)
from retrieval.validation import Record

__all__ = [
    "OperatingPoint",
    "PairCounts",
    "VerificationReport",
    "check_threshold_request",
    "evaluate_verification",
    "fmr_text",
    "threshold_record",
    "verification_lines",
]

_ROUGH_FALSE_MATCHES = 10  # a threshold allowing fewer false matches than this on its split is noted as rough
_ADD_VALIDATION = (
    "set data.val_fraction (e.g. --set data.val_fraction=0.2) or add split=val rows, or choose on the test set "
    "with --set train.select_on_test=true (optimistic, labelled)"
)
_NO_SELECTION = f"verification: no validation split, so no thresholds were chosen (ROC AUC only); {_ADD_VALIDATION}"


class PairCounts(Record):
    """The pairs of a split that were scored: all of them, or a uniform sample of `total` when there are too many."""

    scored: int
    total: int
    sampled: bool
    genuine: int  # same-class pairs among those scored
    impostor: int  # different-class pairs among those scored


class OperatingPoint(Record):
    """The threshold chosen for one target FMR on the selection split, and the rates it gives there and on test."""

    target_fmr: float
    threshold: float
    selection_fmr: float
    selection_fnmr: float
    test_fmr: float
    test_fnmr: float


class VerificationReport(Record):
    """What `evaluate --verification` measured, as the `verification` entry of `evaluate --json` holds it.

    The selection fields are unset (absent from the file) when no split could choose thresholds
    (`chosen_on` None); the record is written with `model_dump(exclude_unset=True)`.
    """

    roc_auc: float
    test_pairs: PairCounts
    chosen_on: Literal["val", "test"] | None
    selection_pairs: PairCounts | None = None
    selection_roc_auc: float | None = None
    operating_points: list[OperatingPoint] | None = None


def _selection(data: RetrievalData, select_on_test: bool) -> tuple[EvalSplit | None, Literal["val", "test"] | None]:
    """The split thresholds are chosen on and its name: validation, else test when opted in, else none."""
    if data.val is not None:
        return data.val, "val"
    if select_on_test:
        return data.test, "test"
    return None, None


def check_threshold_request(save_fmr: float | None, data: RetrievalData, select_on_test: bool) -> None:
    """Refuse `--save-threshold` when no split may choose a threshold (before any image is embedded)."""
    if save_fmr is not None and _selection(data, select_on_test)[0] is None:
        raise UserError(
            f"--save-threshold chooses the threshold on a validation split and there is none; {_ADD_VALIDATION}"
        )


def evaluate_verification(
    test_embeddings: np.ndarray,
    data: RetrievalData,
    select_on_test: bool,
    embed: Callable[[EvalSplit], np.ndarray],
    fmrs: Sequence[float] = FMR_TARGETS,
) -> VerificationReport:
    """Test ROC AUC and, per target FMR, the selection split's threshold with the test FNMR and FMR it gives.

    Args:
        test_embeddings: `(N, D)` embeddings of `data.test` (NaN rows: skipped images, left out).
        data: the splits; `data.val` chooses the thresholds when it exists.
        select_on_test: the opt-in to choose them on the test split when there is no validation split.
        embed: embeds a split (called for the validation split only).
        fmrs: target false match rates.

    Returns:
        The record of `roc_auc`, `test_pairs`, `chosen_on` ("val", "test" or None) and, when chosen,
        `selection_pairs`, `selection_roc_auc` and `operating_points`, one per target FMR with
        `threshold`, `selection_fmr`, `selection_fnmr`, `test_fmr` and `test_fnmr`.
    """
    test = _split_pairs(test_embeddings, data.test)
    split, chosen_on = _selection(data, select_on_test)
    if split is None:
        return VerificationReport(roc_auc=roc_auc(test), test_pairs=_counts(test), chosen_on=None)
    selection = test if chosen_on == "test" else _split_pairs(embed(split), split)
    points = []
    for fmr in fmrs:
        point = threshold_at_fmr(selection, fmr)
        test_fmr, test_fnmr = rates_at(test, point.threshold)
        points.append(
            OperatingPoint(
                target_fmr=fmr,
                threshold=point.threshold,
                selection_fmr=point.fmr,
                selection_fnmr=point.fnmr,
                test_fmr=test_fmr,
                test_fnmr=test_fnmr,
            )
        )
    return VerificationReport(
        roc_auc=roc_auc(test),
        test_pairs=_counts(test),
        chosen_on=chosen_on,
        selection_pairs=_counts(selection),
        selection_roc_auc=roc_auc(selection),
        operating_points=points,
    )


def verification_lines(report: VerificationReport) -> list[str]:
    """The lines `evaluate` prints for `report`: ROC AUC, one line per target FMR, and notes."""
    head = f"verification: ROC AUC {report.roc_auc:.4f} on {_pairs_text(report.test_pairs, 'test')}"
    selection, points = report.selection_pairs, report.operating_points
    if report.chosen_on is None or selection is None or points is None:
        return [head, _NO_SELECTION]
    if report.chosen_on == "val":
        where = f"the {_pairs_text(selection, 'validation')}"
    else:
        where = "the TEST pairs themselves (train.select_on_test; optimistic)"
    lines = [f"{head}; thresholds chosen on {where}"]
    label = "  (chosen on test)" if report.chosen_on == "test" else ""
    for point in points:
        lines.append(
            f"verification at FMR {fmr_text(point.target_fmr)}: threshold {point.threshold:.4f}, "
            f"test FNMR {point.test_fnmr:.4f} at test FMR {point.test_fmr:.4f}{label}"
        )
    impostors = selection.impostor
    for point in points:
        allowed = point.target_fmr * impostors
        if allowed < _ROUGH_FALSE_MATCHES:
            lines.append(
                f"note: FMR {fmr_text(point.target_fmr)} allows {allowed:.1f} false matches among the "
                f"{impostors:,} different-class pairs it was chosen on: its threshold is rough"
            )
    return lines


def threshold_record(report: VerificationReport, fmr: float, dataset: str) -> MatchThreshold:
    """What a checkpoint stores of the threshold at `fmr`: `score` (a pair matches at >= score) and its provenance,
    every field of `MatchThreshold` set (`dataset` is the `data.name` it was measured on)."""
    (point,) = [point for point in report.operating_points or () if point.target_fmr == fmr]
    return MatchThreshold(
        score=point.threshold,
        target_fmr=fmr,
        chosen_on=report.chosen_on,
        selection_fnmr=point.selection_fnmr,
        test_fmr=point.test_fmr,
        test_fnmr=point.test_fnmr,
        dataset=dataset,
    )


def _split_pairs(embeddings: np.ndarray, split: EvalSplit) -> Pairs:
    """The pairs of a split's images that could be read (rows of skipped images are NaN)."""
    kept = ~np.isnan(embeddings).any(axis=1)
    query_mask, gallery_mask = (None if mask is None else mask[kept] for mask in (split.query_mask, split.gallery_mask))
    return pairs_of(embeddings[kept], split.labels[kept], query_mask, gallery_mask)


def _counts(pairs: Pairs) -> PairCounts:
    return PairCounts(
        scored=len(pairs.scores),
        total=pairs.total,
        sampled=pairs.sampled,
        genuine=pairs.num_genuine,
        impostor=pairs.num_impostor,
    )


def _pairs_text(counts: PairCounts, which: str) -> str:
    """`403,651 test pairs (39,972 same-class)`, or `4,999,499 test pairs (sampled uniformly from 49,995,000; ...)`."""
    sampled = f"sampled uniformly from {counts.total:,}; " if counts.sampled else ""
    return f"{counts.scored:,} {which} pairs ({sampled}{counts.genuine:,} same-class)"
