"""`query_index`, what `retrieval index query` runs: a typed request in, one answer per query image out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.index_query import QueryRequest, query_index
from retrieval.index import SearchIndex


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"k": 0}, "-k must be between 1 and 1000, got 0"),
        ({"k": 1001}, "-k must be between 1 and 1000, got 1001"),
        ({"rerank": "qe", "reranker": Path("r")}, "--rerank and --reranker are two re-rankings; pass one"),
        ({"min_score": "0.5", "reranker": Path("r")}, "--min-score compares cosines"),
        ({"rerank": "dba"}, "dba re-ranks the stored vectors, not a query: build the index with --rerank dba"),
        ({"rerank": "qe:k=0"}, "re-ranking qe: k must be a whole number >= 1, got 0"),
    ],
)
def test_a_request_that_contradicts_itself_is_one_line_when_made(fields: dict, message: str) -> None:
    with pytest.raises(UserError) as caught:
        QueryRequest(index=Path("index"), images=(Path("q.png"),), **fields)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def modelless(tmp_path_factory) -> Path:
    """An index of 4 vectors whose manifest records no model: what is refused before a model is needed."""
    folder = tmp_path_factory.mktemp("modelless")
    metadata = pa.table({"path": [f"{i}.png" for i in range(4)], "colour": ["red", "blue"] * 2})
    SearchIndex.build(np.eye(4, dtype=np.float32), metadata, kind="flat", progress=False).save(folder / "index")
    (folder / "q.png").touch()
    return folder


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"where": "size = 3"}, "size"),
        (
            {"columns": ("colour", "shade")},
            "--columns: shade not in the index's metadata; its columns: id, path, colour",
        ),
        ({"min_score": "stored"}, "this index stores no match threshold"),
        ({"min_score": "60"}, "min score must be a cosine in [-1, 1]"),
        ({"images": (Path("missing.png"),)}, "query image not found: missing.png"),
    ],
)
def test_what_the_index_and_the_files_show_is_refused_before_the_model(
    modelless: Path, fields: dict, message: str, monkeypatch
) -> None:
    monkeypatch.chdir(modelless)
    request = QueryRequest(**{"index": Path("index"), "images": (Path("q.png"),), **fields})
    with pytest.raises(UserError) as caught:
        query_index(request)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_checkpoint, csv_dataset_factory) -> tuple[Path, list[Path]]:
    """(index of the CSV dataset built with the tiny checkpoint, its first three train images)."""
    root = tmp_path_factory.mktemp("query")
    csv_path = csv_dataset_factory(root / "data")
    choice = EncoderChoice(checkpoint=tiny_checkpoint, device="cpu")
    build_index(IndexBuildRequest(root / "index", choice, csv=csv_path, kind="flat"))
    return root / "index", sorted((csv_path.parent / "images").glob("train_0_*.png"))[:3]


def test_each_image_finds_itself_first_with_k_results_and_its_row(indexed) -> None:
    index, images = indexed
    report = query_index(QueryRequest(index, tuple(images), k=3, where="split = 'train'", device="cpu"))
    assert [answer.query for answer in report.answers] == [str(image) for image in images]
    assert report.columns == ["split"]  # a table shows the columns the filter names
    for answer, image in zip(report.answers, images, strict=True):
        assert [match.rank for match in answer.results] == [1, 2, 3] and answer.min_score is None
        assert answer.results[0].column("path") == str(image) and answer.results[0].score > 0.999
        assert all(match.column("split") == "train" for match in answer.results)
    assert json.loads(report.json_text()) == [answer.model_dump() for answer in report.answers]


def test_a_minimum_score_drops_results_and_is_reported(indexed) -> None:
    index, images = indexed
    report = query_index(QueryRequest(index, (images[0],), k=5, min_score="0.9999", device="cpu"))
    (answer,) = report.answers
    assert answer.min_score == 0.9999 and [match.column("path") for match in answer.results] == [str(images[0])]
