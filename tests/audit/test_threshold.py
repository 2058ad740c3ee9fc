"""The near-duplicate threshold: chosen on the catalogue's different-label pairs, the override, the group warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.threshold import choose_threshold
from retrieval.config import AuditConfig
from retrieval.core.match_threshold import MatchThreshold
from tests.audit.conftest import NO_HASH

_COPIES = ((0, 1), (40, 41), (80, 81))  # planted near-copies (same class)


def _collapsed(classes: int = 20, per_class: int = 10, dim: int = 32) -> tuple[np.ndarray, Catalogue]:
    """A weakly trained embedding: every image within a few degrees of one direction (every pair above 0.95),
    classes barely apart, and three pairs of near-copies."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(classes), per_class)
    common = np.zeros(dim)
    common[0] = 1.0
    centres = 0.05 * rng.normal(size=(classes, dim)) / np.sqrt(dim)
    embeddings = common + centres[labels] + 0.12 * rng.normal(size=(len(labels), dim)) / np.sqrt(dim)
    for source, copy in _COPIES:
        embeddings[copy] = embeddings[source] + 1e-3 * rng.normal(size=dim) / np.sqrt(dim)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    paths = [Path(f"/catalogue/{row}.png") for row in range(len(labels))]
    return embeddings.astype(np.float32), Catalogue(paths, [f"c{label}" for label in labels])


def _largest_group(findings) -> int:  # type: ignore[no-untyped-def]
    return max((len(members) for members in findings.near.members()), default=0)


def test_a_collapsed_embedding_is_not_one_near_duplicate_group_at_the_chosen_threshold():
    """Issue 49 #1: at a fixed 0.95 a weakly trained model's catalogue was one group (374 of 387 images)."""
    embeddings, catalogue = _collapsed()
    assert (embeddings @ embeddings.T).min() > 0.95  # every pair passes the old fixed threshold
    fixed = audit_embeddings(embeddings, catalogue, AuditConfig(k=5, threshold=0.95, checks=NO_HASH), False)
    assert _largest_group(fixed) > 0.9 * len(catalogue)
    assert len(fixed.summary().warnings) == 1 and "raise it (--set audit.threshold=" in fixed.summary().warnings[0]

    chosen = audit_embeddings(embeddings, catalogue, AuditConfig(k=5, checks=NO_HASH), False)
    assert chosen.threshold.score > 0.95 and chosen.threshold.source.startswith("chosen at FMR 1e-4")
    assert chosen.threshold.source.endswith("rough: the rate allows 1.9 of them")  # 19,000 different-label pairs
    groups = [sorted(members.tolist()) for members in chosen.near.members()]
    for pair in _COPIES:
        assert any(set(pair) <= set(group) for group in groups)
    assert _largest_group(chosen) <= 5 and chosen.summary().warnings == []


def test_the_chosen_threshold_lets_at_most_the_stated_share_of_different_label_pairs_match():
    embeddings, catalogue = _collapsed()
    for fmr in (1e-2, 1e-3):
        threshold = choose_threshold(embeddings, catalogue, None, fmr, floor=-1.0)
        scores = embeddings.astype(np.float64) @ embeddings.T.astype(np.float64)
        labels = np.asarray(catalogue.labels)
        upper = np.triu(np.ones_like(scores, dtype=bool), 1)
        different = upper & (labels[:, None] != labels[None, :])
        assert (scores[different] >= threshold.score).mean() <= fmr
        assert f"FMR {fmr:.0e}".replace("e-0", "e-") in threshold.source


def test_a_well_separated_embedding_keeps_the_floor():
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(4), 20)
    embeddings = np.eye(16)[labels] + 0.1 * rng.normal(size=(80, 16))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    catalogue = Catalogue([Path(f"/c/{row}.png") for row in range(80)], [str(label) for label in labels])
    threshold = choose_threshold(embeddings, catalogue, None, 1e-4, floor=0.95)
    assert threshold.score == 0.95 and threshold.source.startswith("the floor audit.threshold_floor, above FMR")


def test_the_override_wins_and_without_labels_the_model_then_the_floor_decide():
    embeddings, catalogue = _collapsed()
    stored = MatchThreshold(score=0.71, target_fmr=0.001, chosen_on="val")
    assert choose_threshold(embeddings, catalogue, 0.9, 1e-4, 0.95, stored).score == 0.9
    unlabelled = Catalogue(catalogue.paths)
    from_model = choose_threshold(embeddings, unlabelled, None, 1e-4, 0.95, stored)
    assert from_model.score == 0.71 and from_model.source.startswith("the model's match threshold (FMR 0.001")
    floor = choose_threshold(embeddings, unlabelled, None, 1e-4, 0.95)
    assert floor.score == 0.95 and "no labels" in floor.source
    one_each = Catalogue(catalogue.paths, [str(row) for row in range(len(catalogue))])  # no same-label pair
    assert choose_threshold(embeddings, one_each, None, 1e-4, 0.95).score == 0.95


_WITHOUT_TORCH = """
import sys
from pathlib import Path
import numpy as np
from retrieval.audit.catalogue import Catalogue
from retrieval.audit.findings import audit_embeddings
from retrieval.config import AuditConfig
rng = np.random.default_rng(0)
embeddings = rng.normal(size=(40, 8)).astype(np.float32)
embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
catalogue = Catalogue([Path(f"/c/{row}.png") for row in range(40)], [str(row % 4) for row in range(40)])
findings = audit_embeddings(embeddings, catalogue, AuditConfig(k=3, checks=["near_duplicates"]), False)
assert findings.threshold is not None and findings.threshold.source.startswith(("chosen at", "the floor"))
print("torch" in sys.modules)
"""


@pytest.mark.slow  # starts a process
def test_choosing_the_threshold_needs_no_torch():
    """The threshold's pair machinery lives in retrieval.metrics, whose input checks imported torch: `audit
    --model` runs in an install without it (the [serve,audit] extras)."""
    result = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
