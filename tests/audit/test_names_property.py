"""Property: the audit's CSVs and page name every file exactly, whatever its name holds (issue 47, property 5).

A catalogue of generated file names (any character a Linux name may hold: not `/`, not NUL; `|`,
commas, quotes, newlines, carriage returns, `#`, `%`, `?`, `&`, `<`, leading dashes, spaces, any
script) is audited at the library level with a made-up embedding and cleanlab's verdicts made up
too (every row a label issue and an outlier, one confused class pair), so a case costs a fraction of
a second: every file has a byte-identical twin in the other split, so every file is in every
section (the leaks: each test twin with its train partner). Each CSV, read back by Python's `csv`
and as an exclusion list by the toolkit's own reader, and each card of the page (its title and its
link) must name exactly the catalogue's paths.
"""

from __future__ import annotations

import csv
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.duplicates import exact_duplicate_groups, near_duplicate_groups
from retrieval.audit.findings import Findings
from retrieval.audit.knn_graph import build_knn_graph
from retrieval.audit.leaks import copy_leaks
from retrieval.audit.report import write_report
from retrieval.audit.scoring import ClassPair, Scores
from retrieval.audit.threshold import NearThreshold
from retrieval.config import AuditConfig
from retrieval.data.exclusion import excluded_paths
from tests.properties import examples

pytestmark = pytest.mark.property

_MAX_NAME_BYTES = 255  # NAME_MAX of Linux file systems
# Any character but `/` and NUL, surrogates left out: a catalogue's paths come from UTF-8 text (a CSV, an index).
_CHARACTERS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00")
_SPECIAL = st.sampled_from(["|", ",", '"', "'", "\n", "\r", "\r\n", " ", "#", "%", "?", "&", "<", ">", "-", "=", "\\"])
_NAMES = st.lists(st.one_of(_SPECIAL, st.text(_CHARACTERS, min_size=1, max_size=3)), min_size=1, max_size=12).map(
    "".join
)


def file_names() -> st.SearchStrategy[str]:
    """A legal Linux file name: not `.` or `..`, at most 255 bytes in UTF-8."""
    return _NAMES.filter(lambda name: name not in (".", "..") and len(name.encode()) <= _MAX_NAME_BYTES)


class _Cards(HTMLParser):
    """The title and link of every image card of a report page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.titles: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "figure" and values.get("class") == "result":
            self.titles.append(values["title"] or "")
        elif tag == "a" and self.titles and len(self.links) < len(self.titles):
            self.links.append(values["href"] or "")


def _report(folder: Path, names: list[str]) -> tuple[list[Path], Path]:
    """Each name as a file in train and its byte-identical twin (same name, other folder) in test; the report."""
    paths, splits = [], []
    rng = np.random.default_rng(0)
    for name in names:
        pixels = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        for split in ("train", "test"):
            (folder / split).mkdir(exist_ok=True)
            paths.append(folder / split / name)
            Image.fromarray(pixels).save(paths[-1], format="PNG")
            splits.append(split)
    embeddings = np.repeat(np.eye(len(names), 4 + len(names), dtype=np.float32), 2, axis=0)
    catalogue = Catalogue(paths, [f"class {number % 2}" for number in range(len(paths))], splits)
    write_report(_findings(catalogue, embeddings), embeddings, folder / "report", limit=len(paths))
    return paths, folder / "report"


def _findings(catalogue: Catalogue, embeddings: np.ndarray) -> Findings:
    """The audit's own graph, duplicates and leaks; every row flagged by a made-up cleanlab, which costs seconds."""
    settings = AuditConfig(k=1, threshold=0.99)
    graph = build_knn_graph(embeddings, 1, progress=False)
    assert catalogue.splits is not None
    leaks = copy_leaks(catalogue.paths, catalogue.splits, graph.neighbours[:, 0], progress=False)
    codes, class_names = catalogue.label_codes()
    n = len(catalogue)
    flags, scores = np.ones(n, dtype=bool), np.linspace(0.1, 0.9, n)
    pairs = (ClassPair(0, 1, n, 0.5),) if len(class_names) == 2 else ()
    made_up = Scores(scores, scores, flags, scores, flags, 1 - codes, pairs)
    exact = exact_duplicate_groups(catalogue.paths, progress=False)
    threshold = NearThreshold(0.99, "given (audit.threshold)")
    near = near_duplicate_groups(graph, threshold.score)
    return Findings(catalogue, settings, graph, exact, threshold, near, leaks, made_up, class_names)


def _csv_paths(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [row[column] for row in rows for column in ("path", "partner_path") if row.get(column)]


@examples(0.1)
@given(names=st.lists(file_names(), min_size=1, max_size=4, unique=True))
def test_every_csv_and_card_names_each_file_exactly(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths, report = _report(Path(folder), names)
        expected = {str(path) for path in paths}
        for name in ("exact_duplicates", "near_duplicates", "leaks", "label_issues", "outliers"):
            assert sorted(_csv_paths(report / f"{name}.csv")) == sorted(expected), name
        assert set(_csv_paths(report / "confused_classes.csv")) <= expected
        assert excluded_paths(report / "outliers.csv") == set(paths)  # read back as an exclusion list
        page = (report / "index.html").read_text(encoding="utf-8")
        assert "\r" not in page  # HTML reads a raw carriage return as a line feed
        cards = _Cards()
        cards.feed(page)
        assert set(cards.titles) == expected and len(cards.titles) == len(cards.links)
        for title, link in zip(cards.titles, cards.links, strict=True):
            parts = urlsplit(link)
            assert parts.scheme == "file" and unquote(parts.path, errors="strict") == title
