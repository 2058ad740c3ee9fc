"""Duplicates, leaks, label issues, outliers and confused classes found on a catalogue with planted faults."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.audit import AuditSettings, Catalogue, audit_embeddings, threshold_of
from retrieval.audit.duplicates import exact_duplicate_groups, near_duplicate_groups
from retrieval.audit.knn_graph import KnnGraph
from retrieval.audit.leaks import find_leaks, rows_with_copies
from retrieval.core.match_threshold import MatchThreshold


def test_planted_faults_are_found(planted):
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditSettings(k=8, threshold=0.99), False)
    source, copy = planted.copies
    members = findings.near.members()
    assert [sorted(group.tolist()) for group in members] == [[source, copy]]
    assert findings.leaks is not None and np.flatnonzero(findings.leaks.leaked).tolist() == [copy]
    assert findings.leaks.partner[copy] == source
    assert findings.leaks.nearest_leak_share == pytest.approx(1 / 40)  # 40 test rows, one nearest copy
    scores = findings.scores
    assert scores.label_score is not None and scores.is_label_issue is not None
    worst = set(np.argsort(scores.label_score)[: len(planted.flipped) + 1].tolist())
    assert worst == {*planted.flipped.tolist(), planted.outlier}  # an outlier's neighbours hold any class
    assert set(planted.flipped.tolist()) <= set(np.flatnonzero(scores.is_label_issue).tolist())
    assert int(np.argmin(scores.outlier_score)) == planted.outlier
    assert findings.exact is not None and [group.tolist() for group in findings.exact.members()] == [[source, copy]]


def test_without_labels_only_outliers_are_scored(planted):
    catalogue = Catalogue(planted.catalogue.paths, None, planted.catalogue.splits)
    findings = audit_embeddings(planted.embeddings, catalogue, AuditSettings(k=8, hash_files=False), False)
    assert findings.scores.label_score is None and findings.class_names == []
    assert int(np.argmin(findings.scores.outlier_score)) == planted.outlier
    assert findings.exact is None


def test_exact_duplicates_are_grouped_by_content(tmp_path):
    paths = []
    for name, data in (("a", b"one"), ("b", b"two"), ("c", b"one"), ("d", b"two"), ("e", b"three")):
        paths.append(tmp_path / name)
        paths[-1].write_bytes(data)
    groups = exact_duplicate_groups([*paths, tmp_path / "missing"], progress=False)
    assert groups.group.tolist() == [0, 1, 0, 1, -1, -1]
    assert [members.tolist() for members in groups.members()] == [[0, 2], [1, 3]]


def test_near_duplicate_groups_follow_chains_and_edges_seen_from_one_end():
    # 0-1 and 1-2 score above 0.9, 0-2 below: one group; 3's edge to 4 is listed by 4 only.
    neighbours = np.array([[1, 2], [0, 2], [1, 0], [0, 1], [3, 0]])
    scores = np.array([[0.95, 0.8], [0.95, 0.93], [0.93, 0.8], [0.1, 0.1], [0.97, 0.1]], dtype=np.float32)
    groups = near_duplicate_groups(KnnGraph(neighbours, scores, True), 0.9)
    assert groups.group.tolist() == [0, 0, 0, 1, 1]
    assert groups.score[3] == pytest.approx(0.97)


def test_leaks_are_reported_on_the_later_split_from_either_end():
    neighbours = np.array([[1, 2], [0, 2], [0, 1]])
    scores = np.array([[0.99, 0.2], [0.99, 0.2], [0.2, 0.2]], dtype=np.float32)
    leaks = find_leaks(KnnGraph(neighbours, scores, True), ["test", "train", "val"], 0.9)
    assert leaks.leaked.tolist() == [True, False, False]
    assert leaks.partner[0] == 1 and leaks.nearest_leak_share == 1.0


def test_rows_with_copies_compares_with_the_best_other_row():
    queries = np.eye(3, dtype=np.float32)
    others = np.array([[1, 0, 0], [0, 0.6, 0.8]], dtype=np.float32)
    assert rows_with_copies(queries, others, 0.95).tolist() == [True, False, False]
    assert rows_with_copies(queries, others[:0], 0.95).tolist() == [False, False, False]


def test_threshold_comes_from_the_flag_then_the_model_then_the_default():
    stored = MatchThreshold(score=0.71, target_fmr=0.001, chosen_on="val")
    assert threshold_of(stored, 0.9) == (0.9, "--threshold")
    assert threshold_of(stored, None) == (0.71, "the model's match threshold (FMR 0.001, chosen on val)")
    assert threshold_of(None, None)[1] == "default"


def test_bad_settings_are_value_errors(planted):
    with pytest.raises(ValueError, match="threshold must be a cosine"):
        AuditSettings(threshold=2.0)
    with pytest.raises(ValueError, match="120 embeddings for 2 images"):
        audit_embeddings(planted.embeddings, planted.catalogue.subset(np.arange(2)), AuditSettings())
