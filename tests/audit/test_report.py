"""The report folder: one CSV per section whose rows name existing image paths, summary.json and index.html."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np

from retrieval.audit.catalogue import Catalogue, read_catalogue
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.report import write_report
from retrieval.audit.tables import SECTIONS
from retrieval.audit.trust import Selection, trust_warning
from retrieval.config import AuditConfig
from retrieval.data.exclusion import excluded_paths


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_section_is_written_and_names_its_images(planted, tmp_path):
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    summary = write_report(findings, planted.embeddings, tmp_path / "report", limit=5)
    files = {path.name for path in (tmp_path / "report").iterdir()}
    assert files == {f"{section.name}.csv" for section in SECTIONS} | {"summary.json", "index.html"}
    for section in SECTIONS:
        rows = _rows(tmp_path / "report" / f"{section.name}.csv")
        assert tuple(rows[0].keys()) == section.columns
        for row in rows:
            assert all(Path(path).is_file() for path in row["path"].split("|"))
    source, copy = (str(planted.catalogue.paths[row]) for row in planted.copies)
    (leak,) = _rows(tmp_path / "report" / "leaks.csv")
    assert (leak["path"], leak["split"], leak["partner_path"], leak["partner_split"]) == (copy, "test", source, "train")
    labels = _rows(tmp_path / "report" / "label_issues.csv")
    flipped = {str(planted.catalogue.paths[row]) for row in planted.flipped}
    assert flipped <= {row["path"] for row in labels}
    assert {row["suggested_label"] for row in labels if row["path"] in flipped} == {
        planted.true_labels[row] for row in planted.flipped
    }
    assert json.loads((tmp_path / "report" / "summary.json").read_text()) == summary.model_dump()
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("data:image/jpeg;base64,") >= 4 and "Leaks between splits (1 row)" in page


def test_a_duplicate_csv_excludes_all_but_each_groups_first_image(planted, tmp_path):
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    source, copy = planted.copies
    assert excluded_paths(tmp_path / "report" / "near_duplicates.csv") == {planted.catalogue.paths[copy]}
    assert excluded_paths(tmp_path / "report" / "leaks.csv") == {planted.catalogue.paths[copy]}
    assert planted.catalogue.paths[source] not in excluded_paths(tmp_path / "report" / "exact_duplicates.csv")


def test_a_catalogue_without_labels_or_splits_says_what_it_leaves_out_once(planted, tmp_path):
    listing = tmp_path / "images.csv"
    listing.write_text("path\n" + "".join(f"{path}\n" for path in planted.catalogue.paths))
    catalogue = read_catalogue(listing)
    assert catalogue.labels is None and catalogue.splits is None and len(catalogue.missing) == 2
    findings = audit_embeddings(planted.embeddings, catalogue, AuditConfig(k=8, threshold=0.99), False)
    summary = write_report(findings, planted.embeddings, tmp_path / "report")
    names = {path.name for path in (tmp_path / "report").iterdir()}
    assert names == {"exact_duplicates.csv", "near_duplicates.csv", "outliers.csv", "summary.json", "index.html"}
    assert summary.left_out == catalogue.missing
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("no split column") == 1


def test_audit_checks_left_out_write_no_section_and_are_said_once(planted, tmp_path):
    settings = AuditConfig(k=8, checks=["near_duplicates", "label_issues"])
    findings = audit_embeddings(planted.embeddings, planted.catalogue, settings, False)
    assert findings.exact is None and findings.leaks is None
    summary = write_report(findings, planted.embeddings, tmp_path / "report")
    names = {path.name for path in (tmp_path / "report").iterdir()}
    assert names == {"near_duplicates.csv", "label_issues.csv", "summary.json", "index.html"}
    not_run = "checks not run (audit.checks): exact_duplicates, leaks, outliers, confused_classes"
    assert summary.left_out == [not_run] and summary.outliers is None and summary.leaked_rows is None
    assert (tmp_path / "report" / "index.html").read_text().count(not_run) == 1


def test_a_large_group_shows_a_dozen_images_and_counts_the_rest(planted, tmp_path):
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.0), False)
    write_report(findings, planted.embeddings, tmp_path / "report", limit=1)
    page = (tmp_path / "report" / "index.html").read_text()
    section = page[page.index("id='near_duplicates'") : page.index("id='leaks'")]
    first_group = len(findings.near.members()[0])
    assert first_group > 12 and section.count("<img") == 12 and f"and {first_group - 12} more" in section


def test_an_unreadable_image_still_renders_the_page(planted, tmp_path):
    paths = list(planted.catalogue.paths)
    paths[planted.outlier].write_bytes(b"not an image")
    catalogue = Catalogue(paths, planted.catalogue.labels, planted.catalogue.splits)
    findings = audit_embeddings(planted.embeddings, catalogue, AuditConfig(k=8), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    assert "Outliers" in (tmp_path / "report" / "index.html").read_text()
    assert np.isfinite(findings.scores.outlier_score).all()


def _renamed(planted, names: dict[int, str]) -> Catalogue:
    """The planted catalogue with the files of some rows renamed."""
    paths = list(planted.catalogue.paths)
    for row, name in names.items():
        paths[row] = paths[row].rename(paths[row].with_name(name))
    return Catalogue(paths, planted.catalogue.labels, planted.catalogue.splits)


def test_a_file_name_holding_a_bar_is_one_card_with_its_thumbnail(planted, tmp_path):
    """Issue 47 #8: the page split `a|b.png` into two cards of files that do not exist, with empty thumbnails."""
    source, copy = planted.copies
    catalogue = _renamed(planted, {source: "train|copy.png", copy: "test|copy.png"})
    findings = audit_embeddings(planted.embeddings, catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text()
    leak = page[page.index("id='leaks'") : page.index("id='label_issues'")]
    assert leak.count("<figure") == 2 and leak.count("src='data:image/jpeg;base64,") == 2
    assert f"title='{catalogue.paths[copy]}'" in leak and f"title='{catalogue.paths[source]}'" in leak
    assert "train%7Ccopy.png" in leak  # the link to the file, percent-encoded


def test_a_file_name_holding_a_carriage_return_is_one_csv_cell(planted, tmp_path):
    """Found by the names property: Python's writer left a lone CR unquoted, and a reader ended the row there."""
    source, copy = planted.copies
    catalogue = _renamed(planted, {copy: "copy\r.png"})
    findings = audit_embeddings(planted.embeddings, catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    (leak,) = _rows(tmp_path / "report" / "leaks.csv")
    assert leak["path"] == str(catalogue.paths[copy]) and leak["partner_path"] == str(catalogue.paths[source])
    assert "\r" not in (tmp_path / "report" / "index.html").read_text()  # a reference there: HTML reads CR as LF


def test_confused_classes_name_one_example_a_row(planted, tmp_path):
    """The examples were joined by `|` in one cell: not an exclusion list, and ambiguous for a name with a bar."""
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    rows = _rows(tmp_path / "report" / "confused_classes.csv")
    assert rows and all(Path(row["path"]).is_file() for row in rows)
    assert len({(row["class_a"], row["class_b"]) for row in rows}) == len(findings.scores.class_pairs)


def test_a_label_error_card_shows_the_current_and_the_suggested_label_and_a_reason(planted, tmp_path):
    """Issue 49 #4: a card showed the suggested label only, its caption cut to about 10 characters."""
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    page = (tmp_path / "report" / "index.html").read_text()
    section = page[page.index("id='label_issues'") : page.index("id='outliers'")]
    (first, *_) = _rows(tmp_path / "report" / "label_issues.csv")
    caption = f"{first['split']} · label: {first['label']} · suggested: {first['suggested_label']}"
    assert f"<figcaption class='meta label'>{caption}</figcaption>" in section
    label, suggested = first["label"], first["suggested_label"]
    assert f"labelled &#x27;{label}&#x27;, its neighbours say &#x27;{suggested}&#x27;" in section
    assert section.count("<div class='reason'>") == len(_rows(tmp_path / "report" / "label_issues.csv"))
    assert ".finding .result .label { white-space: normal;" in page  # captions wrap, never cut


def test_a_label_error_card_shows_the_neighbours_that_voted_and_their_labels(planted, tmp_path):
    """Issue 49 #4: a label-error card did not show the neighbours whose votes made it."""
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, tmp_path / "report")
    rows = {row["path"]: row for row in _rows(tmp_path / "report" / "label_issues.csv")}
    flipped = int(planted.flipped[0])
    row = rows[str(planted.catalogue.paths[flipped])]
    labels = planted.catalogue.labels
    assert labels is not None
    voters = findings.graph.neighbours[flipped]
    votes = [part.rsplit(" ", 1) for part in row["votes"].split("; ")]
    assert {label: int(count) for label, count in votes} == Counter(labels[other] for other in voters)
    assert [int(count) for _, count in votes] == sorted((int(count) for _, count in votes), reverse=True)
    assert row["votes"].startswith(f"{row['suggested_label']} ")
    page = (tmp_path / "report" / "index.html").read_text()
    section = page[page.index("id='label_issues'") : page.index("id='outliers'")]
    card = section[section.index(f"title='{row['path']}'") :]
    card = card[: card.index("<div class='finding'>") if "<div class='finding'>" in card else len(card)]
    for number, other in enumerate(voters, start=1):
        assert f"title='{planted.catalogue.paths[other]}'" in card
        assert f"neighbour {number} · label: {labels[other]} · cosine " in card
    assert f"votes: {row['votes']}" in card


def test_a_checkpoint_that_retrieves_poorly_says_its_label_and_outlier_findings_are_not_to_be_trusted(
    planted, tmp_path
):
    """Issue 49 #4: on a weak model the label and outlier findings were listed as if sound."""
    poor = Selection("recall@1", 0.31, 3)
    findings = audit_embeddings(
        planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False, selection=poor
    )
    summary = write_report(findings, planted.embeddings, tmp_path / "report")
    (warning,) = summary.warnings
    assert "Recall@1 at model selection is 0.3100 (epoch 3), below 0.5" in warning and "not to be trusted" in warning
    assert (tmp_path / "report" / "index.html").read_text().count("not to be trusted") == 1
    for selection in (Selection("recall@1", 0.5, 3), Selection("map@r", 0.2, 3), Selection("recall@1", -1.0, 0), None):
        assert trust_warning(selection) is None
    only_copies = AuditConfig(k=8, threshold=0.99, checks=["near_duplicates", "leaks"])
    assert audit_embeddings(planted.embeddings, planted.catalogue, only_copies, False, selection=poor).warnings() == []
