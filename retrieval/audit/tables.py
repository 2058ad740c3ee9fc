"""The report's tables: one list of rows per section, each row naming the image path(s) it is about.

Every table has a `path` column holding one absolute path a row (never joined: a file name may hold
any character but `/`), so any of its CSVs is an exclusion list (`retrieval.data.exclusion`); the
duplicate tables add `keep` (1 for each group's first member).
Rows come ranked: groups in catalogue order, leaks by ratio (surest first), label issues and
outliers by strangeness (highest first), class pairs by cleanlab's joint share.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # cleanlab, scikit-learn and scipy load with these: the page needs only their types
    from retrieval.audit.duplicates import Groups
    from retrieval.audit.findings import Findings


__all__ = [
    "SECTIONS",
    "Cell",
    "ConfusedPairRow",
    "ExactDuplicateRow",
    "LabelIssueRow",
    "LeakRow",
    "NearDuplicateRow",
    "OutlierRow",
    "Row",
    "Section",
    "Voter",
    "report_tables",
]

Cell = str | int | float  # a CSV cell; "" where a value does not apply (no labels, no split column)

_EXAMPLES = 4  # example images (rows) per confused class pair


@dataclass(frozen=True)
class Section:
    """One report section: its CSV's name, title, columns and the sentence saying what a row is."""

    name: str
    title: str
    columns: tuple[str, ...]
    about: str


@dataclass(frozen=True)
class Row:
    """A row of a section's table: the CSV writer and the HTML page read its cells by column name."""

    def cell(self, column: str) -> Cell:
        """The cell of `column`; "" for a column this row has not (a path column of another section)."""
        value: Cell = getattr(self, column, "")
        return value


@dataclass(frozen=True)
class _ImageRow(Row):
    path: str  # absolute, so the CSV is an exclusion list
    split: str
    label: str


@dataclass(frozen=True)
class ExactDuplicateRow(_ImageRow):
    """A file of a group of identical files; `keep` is 1 for the group's first member."""

    group: int
    keep: int
    labels_agree: int | str  # 1 when the group's labels agree, "" without labels


@dataclass(frozen=True)
class NearDuplicateRow(ExactDuplicateRow):
    """An image of a group the embedding scores as copies; `score`: the best cosine within the group."""

    score: float


@dataclass(frozen=True)
class LeakRow(_ImageRow):
    """An image with a copy (`partner_*`) in an earlier split; `ratio`: lower is surer; `score`: thumbnails' cosine;
    `colour`: "differs" when the two differ only in colour (a recoloured drawing, perhaps another item), else "same"."""

    partner_path: str
    partner_split: str
    partner_label: str
    ratio: float
    score: float
    colour: str


@dataclass(frozen=True)
class Voter:
    """A neighbour whose label voted on a label issue: its path, label and cosine to the image."""

    path: str
    label: str
    score: float


@dataclass(frozen=True)
class LabelIssueRow(_ImageRow):
    """A likely label error, ranked from the most likely; `label_score` lower is more likely wrong; `votes` the
    neighbours' labels with their counts, most first; `voters` (the page's, no CSV column) the neighbours."""

    rank: int
    suggested_label: str
    label_score: float
    votes: str
    voters: tuple[Voter, ...] = ()


@dataclass(frozen=True)
class OutlierRow(_ImageRow):
    """An outlier, ranked strangest first; the nearest class and its cosine are "" without labels."""

    rank: int
    strangeness: float
    outlier_score: float
    nearest_class: str
    class_score: float | str


@dataclass(frozen=True)
class ConfusedPairRow(Row):
    """An example image of a pair of classes whose images are each other's neighbours (up to 4 rows a pair)."""

    class_a: str
    class_b: str
    count: int
    joint: float
    path: str  # "" for a pair without an example


SECTIONS = (
    Section(
        "exact_duplicates",
        "Exact duplicates",
        ("group", "keep", "path", "split", "label", "labels_agree"),
        "files with identical bytes (sha256), one row per file; keep=0 rows collapse each group to one image",
    ),
    Section(
        "near_duplicates",
        "Near-duplicates",
        ("group", "keep", "path", "split", "label", "score", "labels_agree"),
        "images the embedding scores as copies (connected at the threshold); score: best cosine within the group",
    ),
    Section(
        "leaks",
        "Leaks between splits",
        ("path", "split", "label", "partner_path", "partner_split", "partner_label", "ratio", "score", "colour"),
        "an image with a copy in an earlier split (train < val < test); path is the later split's image; ratio: "
        "distance to the copy over distance to the next image (lower is surer), score: the thumbnails' cosine; "
        "colour: differs when the two differ only in colour (a recoloured drawing: perhaps another item)",
    ),
    Section(
        "label_issues",
        "Likely label errors",
        ("rank", "path", "split", "label", "suggested_label", "label_score", "votes"),
        "cleanlab's label issues from the kNN label distribution, with the neighbours that voted; label_score: lower "
        "is more likely wrong; votes: the neighbours' labels and how many of them hold each, most first",
    ),
    Section(
        "outliers",
        "Outliers",
        ("rank", "path", "split", "label", "strangeness", "outlier_score", "nearest_class", "class_score"),
        "far from every class with its neighbours (strangeness: 1 - best cosine to a class's mean direction, "
        "averaged over the image and its neighbours; without labels 1 - outlier_score), strangest first; "
        "outlier_score: cleanlab's distance to the neighbours, lower is stranger; class_score: the image's best cosine "
        "to a class's mean direction",
    ),
    Section(
        "confused_classes",
        "Most confused classes",
        ("class_a", "class_b", "count", "joint", "path"),
        "class pairs whose images are each other's neighbours (candidates to merge or split); one row per example "
        "image (path), up to 4 a pair",
    ),
)


def report_tables(findings: Findings, embeddings: np.ndarray) -> dict[str, list[Row]]:
    """Rows of every section present: asked for (`audit.checks`) and possible (labels, a split column)."""
    tables: dict[str, list[Row]] = {}
    if findings.exact is not None:
        tables["exact_duplicates"] = _group_rows(findings, findings.exact, with_score=False)
    if findings.near is not None:
        tables["near_duplicates"] = _group_rows(findings, findings.near, with_score=True)
    if findings.leaks is not None:
        tables["leaks"] = _leak_rows(findings)
    if findings.scores.label_score is not None and findings.ran("label_issues"):
        tables["label_issues"] = _label_rows(findings)
    if findings.ran("outliers"):
        tables["outliers"] = _outlier_rows(findings, embeddings)
    if findings.class_names and findings.ran("confused_classes"):
        tables["confused_classes"] = _pair_rows(findings)
    return tables


def _cells(findings: Findings, row: int) -> dict[str, str]:
    """The path, split and label of catalogue row `row` ("" for a column the catalogue has not)."""
    catalogue = findings.catalogue
    return {
        "path": str(catalogue.paths[row]),
        "split": "" if catalogue.splits is None else catalogue.splits[row],
        "label": "" if catalogue.labels is None else catalogue.labels[row],
    }


def _group_rows(findings: Findings, groups: Groups, with_score: bool) -> list[Row]:
    labels = findings.catalogue.labels
    rows: list[Row] = []
    for number, members in enumerate(groups.members()):
        agree = "" if labels is None else int(len({labels[i] for i in members}) == 1)
        for position, member in enumerate(members):
            row = ExactDuplicateRow(
                **_cells(findings, int(member)), group=number, keep=int(position == 0), labels_agree=agree
            )
            if with_score:
                row = NearDuplicateRow(**dataclasses.asdict(row), score=round(float(groups.score[member]), 6))
            rows.append(row)
    return rows


def _leak_rows(findings: Findings) -> list[Row]:
    leaks, recoloured = findings.leaks, findings.recoloured
    assert leaks is not None  # report_tables asks only then
    leaked = np.flatnonzero(leaks.leaked)
    rows: list[Row] = []
    for row in leaked[np.argsort(leaks.ratio[leaked], kind="stable")]:
        partner = _cells(findings, int(leaks.partner[row]))
        rows.append(
            LeakRow(
                **_cells(findings, int(row)),
                partner_path=partner["path"],
                partner_split=partner["split"],
                partner_label=partner["label"],
                ratio=round(float(leaks.ratio[row]), 6),
                score=round(float(leaks.score[row]), 6),
                colour="differs" if recoloured is not None and recoloured[row] else "same",
            )
        )
    return rows


def _label_rows(findings: Findings) -> list[Row]:
    scores = findings.scores
    assert scores.label_score is not None and scores.is_label_issue is not None and scores.predicted is not None
    flagged = np.flatnonzero(scores.is_label_issue)
    ranked = flagged[np.argsort(scores.label_score[flagged], kind="stable")]
    rows: list[Row] = []
    for rank, row in enumerate(ranked, start=1):
        voters = tuple(
            Voter(
                **{name: _cells(findings, int(other))[name] for name in ("path", "label")}, score=round(float(score), 6)
            )
            for other, score in zip(findings.graph.neighbours[row], findings.graph.scores[row], strict=True)
        )
        rows.append(
            LabelIssueRow(
                rank=rank,
                **_cells(findings, int(row)),
                suggested_label=findings.class_names[int(scores.predicted[row])],
                label_score=round(float(scores.label_score[row]), 6),
                votes=_votes(voters),
                voters=voters,
            )
        )
    return rows


def _votes(voters: tuple[Voter, ...]) -> str:
    """`coat 6; sandal 4`: each label among the voters with its count, most first (ties in first-seen order)."""
    counts = Counter(voter.label for voter in voters)
    return "; ".join(f"{label} {count}" for label, count in counts.most_common())


def _outlier_rows(findings: Findings, embeddings: np.ndarray) -> list[Row]:
    scores = findings.scores
    flagged = np.flatnonzero(scores.is_outlier)
    ranked = flagged[np.argsort(-scores.strangeness[flagged], kind="stable")]
    nearest, similarity = _class_similarity(findings, embeddings, ranked)
    return [
        OutlierRow(
            rank=rank,
            **_cells(findings, int(row)),
            strangeness=round(float(scores.strangeness[row]), 6),
            outlier_score=round(float(scores.outlier_score[row]), 6),
            nearest_class="" if nearest is None else findings.class_names[int(nearest[rank - 1])],
            class_score="" if similarity is None else round(float(similarity[rank - 1]), 6),
        )
        for rank, row in enumerate(ranked, start=1)
    ]


def _class_similarity(
    findings: Findings, embeddings: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """For `rows`: the most similar class mean direction (over the whole catalogue) and that cosine; None unlabelled."""
    if not findings.class_names:
        return None, None
    codes, names = findings.catalogue.label_codes()
    means = np.zeros((len(names), embeddings.shape[1]))
    np.add.at(means, codes, embeddings)
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    scores = embeddings[rows] @ means.T
    return scores.argmax(axis=1), scores.max(axis=1)


def _pair_rows(findings: Findings) -> list[Row]:
    codes, names = findings.catalogue.label_codes()
    predicted = findings.scores.predicted
    assert predicted is not None  # labels were scored
    rows: list[Row] = []
    for pair in findings.scores.class_pairs:
        swapped = ((codes == pair.first) & (predicted == pair.second)) | (
            (codes == pair.second) & (predicted == pair.first)
        )
        examples = [str(findings.catalogue.paths[row]) for row in np.flatnonzero(swapped)[:_EXAMPLES]]
        rows.extend(
            ConfusedPairRow(
                class_a=names[pair.first],
                class_b=names[pair.second],
                count=pair.count,
                joint=round(pair.joint, 6),
                path=path,
            )
            for path in examples or [""]
        )
    return rows
