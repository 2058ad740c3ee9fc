"""Duplicates, leaks, label issues, outliers and confused classes found on a catalogue with planted faults."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFilter

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.copies import describe_images
from retrieval.audit.copy_index import copy_graph, copy_index
from retrieval.audit.duplicates import exact_duplicate_groups, near_duplicate_groups
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.knn_graph import KnnGraph
from retrieval.audit.leaks import copy_leaks, find_leaks
from retrieval.config import AuditConfig
from tests.audit.conftest import NO_HASH


def test_planted_faults_are_found(planted):
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
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
    findings = audit_embeddings(planted.embeddings, catalogue, AuditConfig(k=8, checks=NO_HASH), False)
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


def test_a_leak_is_an_earlier_split_partner_much_nearer_than_anything_else():
    # Row 0 (test): its train partner 1 at cosine 0.999, the next image at 0.9: a copy.
    # Row 2 (val): its train partner 1 at 0.95 but row 3 at 0.94, a look-alike as near: no copy, however similar.
    # Row 3 (test): likewise with its val neighbour 2.
    # Row 4 (test): an identical descriptor to its partner, but as identical to another image (a flat colour): none.
    neighbours = np.array([[1, 2], [0, 2], [1, 3], [2, 1], [1, 3]])
    scores = np.array([[0.999, 0.9], [0.999, 0.95], [0.95, 0.94], [0.94, 0.93], [1.0, 1.0]], dtype=np.float32)
    splits = ["test", "train", "val", "test", "test"]
    leaks = find_leaks(KnnGraph(neighbours, scores, True), np.array([1, 0, 3, 2, 3]), splits, 0.5)
    assert leaks.leaked.tolist() == [True, False, False, False, False]
    assert leaks.partner[0] == 1 and leaks.ratio[0] == pytest.approx(np.sqrt(0.002 / 0.2), rel=1e-3)
    assert leaks.partner[1] == -1 and leaks.ratio[1] == np.inf  # train has no earlier split
    assert leaks.ratio[2] > 0.9 and leaks.ratio[4] == pytest.approx(1.0)
    assert leaks.nearest_leak_share == pytest.approx(1 / 3)  # row 0's embedding neighbour is its copy


def test_the_copy_check_finds_a_crop_and_a_recolouring_of_a_textured_image(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for row in range(6):
        paths.append(tmp_path / f"{row}.png")
        Image.fromarray(rng.integers(0, 256, size=(40, 40), dtype=np.uint8)).filter(ImageFilter.BLUR).save(paths[-1])
    source = Image.open(paths[0])
    source.crop((2, 1, 38, 37)).resize((40, 40)).save(tmp_path / "crop.png")
    Image.fromarray((np.asarray(source) * 0.8 + 20).astype(np.uint8)).save(tmp_path / "recoloured.png")
    paths += [tmp_path / "crop.png", tmp_path / "recoloured.png", tmp_path / "missing.png"]
    graph = copy_graph(copy_index(describe_images(paths, progress=False)), 3)
    assert graph.neighbours[6, 0] == 0 and graph.neighbours[7, 0] == 0
    assert (graph.neighbours[8] == -1).all()  # unreadable: nobody's copy
    splits = ["train"] * 6 + ["test", "test", "test"]
    leaks = find_leaks(graph, graph.neighbours[:, 0], splits)
    assert np.flatnonzero(leaks.leaked).tolist() == [6, 7]


def test_bad_settings_are_value_errors(planted):
    with pytest.raises(ValueError, match="120 embeddings for 2 images"):
        audit_embeddings(planted.embeddings, planted.catalogue.subset(np.arange(2)), AuditConfig())


def test_a_test_image_identical_to_several_training_images_is_a_leak(tmp_path):
    """Issue 49 #3: a copy with two or more identical earlier-split partners was no leak (its ratio to the second
    partner is 1), so `evaluate --exclude-leaks` kept it. Every copy counts, whatever its number of partners."""
    rng = np.random.default_rng(0)
    paths, splits = [], []

    def add(name: str, split: str, image: Image.Image | None = None, same_as: Path | None = None) -> Path:
        paths.append(tmp_path / name)
        splits.append(split)
        if same_as is not None:
            paths[-1].write_bytes(same_as.read_bytes())
        else:
            assert image is not None
            image.save(paths[-1])
        return paths[-1]

    for row in range(6):
        add(
            f"{row}.png",
            "train",
            Image.fromarray(rng.integers(0, 256, size=(40, 40), dtype=np.uint8)).filter(ImageFilter.BLUR),
        )
    twice, thrice = paths[0], paths[1]
    add("0-twin.png", "train", same_as=twice)
    add("1-twin.png", "train", same_as=thrice)
    add("1-triplet.png", "val", same_as=thrice)
    white = add("white.png", "train", Image.new("L", (40, 40), 255))
    add("white-twin.png", "train", same_as=white)
    add("copy-of-0.png", "test", same_as=twice)  # identical to two train images
    add("copy-of-1.png", "test", same_as=thrice)  # identical to two train images and a val one
    brighter = Image.fromarray((np.asarray(Image.open(thrice)) * 0.8 + 20).astype(np.uint8))
    add("near-copy-of-1.png", "test", brighter)  # a near copy of a picture held three times
    add("white-copy.png", "test", same_as=white)  # a flat picture: identical bytes, no thumbnail to compare
    add("black.png", "test", Image.new("L", (40, 40), 0))  # flat too, but a copy of nothing
    leaks = copy_leaks(paths, splits, progress=False)
    named = {paths[row].name: paths[int(leaks.partner[row])].name for row in np.flatnonzero(leaks.leaked)}
    assert named == {
        "1-triplet.png": "1.png",
        "copy-of-0.png": "0.png",
        "copy-of-1.png": "1.png",
        "near-copy-of-1.png": "1.png",
        "white-copy.png": "white.png",
    }
    assert (leaks.ratio[leaks.leaked] < 0.5).all() and leaks.ratio[paths.index(tmp_path / "black.png")] > 0.5
