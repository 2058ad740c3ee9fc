"""`serve --reranker DIR`: searches by image and by id re-scored by a learned re-ranker, as `index query` does."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.index_query import QueryRequest, query_index
from retrieval.export.onnx_export import export_checkpoint
from retrieval.serve import create_app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def indexed(tiny_reranker, tiny_reranker_indexes) -> tuple[Path, Path, Path]:
    """(index dir of the re-ranker's dataset, the re-ranker forced to apply (N=4, w=0.5), its dataset csv)."""
    index, forced, _ = tiny_reranker_indexes
    return index, forced, tiny_reranker[1]


def test_an_upload_and_an_id_search_answer_as_index_query_does(indexed, serving, serve_limits):
    index, reranker, dataset = indexed
    image = dataset.parent / "images" / "train_1_2.png"
    # What `index query --image IMAGE -k 5 --reranker DIR --json` prints: the report's JSON.
    request = QueryRequest(index, images=(image,), k=5, reranker=reranker, device="cpu")
    expected = json.loads(query_index(request).json_text())[0]["results"]
    app = create_app(index, device="cpu", limits=serve_limits, reranker_dir=reranker)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        upload = {"image": ("q.png", image.read_bytes(), "image/png")}
        answer = client.post("/search", files=upload, data={"k": "5"}).json()
        assert [result["id"] for result in answer["results"]] == [result["id"] for result in expected]
        scores = [result["score"] for result in answer["results"]]
        assert scores == pytest.approx([result["score"] for result in expected], abs=1e-5)
        by_id = client.post("/search", json={"id": expected[0]["id"], "k": 4}).json()["results"]
        assert [result["id"] for result in by_id] == [result["id"] for result in expected[1:5]]
        # regression: min_score would compare a cosine threshold with blended scores
        refused = client.post("/search", files=upload, data={"k": "5", "min_score": "0.5"})
        assert refused.status_code == 400 and "min_score compares cosines" in refused.json()["error"]
        by_vector = client.post("/search", json={"vector": [1.0] + [0.0] * 15, "k": 3, "min_score": 0.0})
        assert by_vector.status_code == 200  # a search by vector has no image: the embedding alone, min_score as ever


def test_another_checkpoints_index_and_two_rerankings_are_refused(indexed, other_checkpoint, serve_limits, tmp_path):
    index, reranker, dataset = indexed
    with pytest.raises(UserError, match="two re-rankings"):
        create_app(index, device="cpu", limits=serve_limits, rerank="qe", reranker_dir=reranker)
    build_index(
        IndexBuildRequest(
            tmp_path / "o", EncoderChoice(checkpoint=other_checkpoint, device="cpu"), csv=dataset, kind="flat"
        )
    )
    with pytest.raises(UserError, match="this re-ranker belongs to checkpoint"):
        create_app(tmp_path / "o", device="cpu", limits=serve_limits, reranker_dir=reranker)


def test_serve_with_an_export_and_a_reranker_answers_without_torch(indexed, tiny_reranker, tmp_path):
    """The `[serve]` install: `serve --index INDEX --model BUNDLE --reranker DIR` with the training packages blocked."""
    from tests.cli.serve_without_torch import serve_without_torch

    checkpoint, dataset, _, _ = tiny_reranker
    _, reranker, _ = indexed
    bundle, index_dir = tmp_path / "onnx", tmp_path / "index"
    # What `export --format onnx` and `index build --model BUNDLE --type flat` run; then `serve` itself, below.
    export_checkpoint(checkpoint, bundle)
    build_index(IndexBuildRequest(index_dir, EncoderChoice(model=bundle), csv=dataset, kind="flat"))
    image = dataset.parent / "images" / "test_100_0.png"
    servings = [["--index", str(index_dir), "--model", str(bundle), "--reranker", str(reranker)]]
    result = serve_without_torch(image, servings)
    status, found = result["answers"][0]["image"]
    assert status == 200 and found["results"][0]["path"].endswith("test_100_0.png")  # its own image first
    scores = [item["score"] for item in found["results"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert result["loaded"] == []


def test_a_reranker_chosen_over_dba_serves_only_an_index_of_that_dba(
    indexed, tiny_reranker_over_dba, serving, serve_limits
):
    index, _, dataset = indexed
    dba_index, over_dba = tiny_reranker_over_dba
    with pytest.raises(UserError, match="chosen on dba:k=2,alpha=0 results, but this index stores plain vectors"):
        create_app(index, device="cpu", limits=serve_limits, reranker_dir=over_dba)
    image = dataset.parent / "images" / "train_1_2.png"
    expected = json.loads(
        query_index(QueryRequest(dba_index, images=(image,), k=5, reranker=over_dba, device="cpu")).json_text()
    )
    app = create_app(dba_index, device="cpu", limits=serve_limits, reranker_dir=over_dba)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        upload = {"image": ("q.png", image.read_bytes(), "image/png")}
        answer = client.post("/search", files=upload, data={"k": "5"}).json()
        assert [result["id"] for result in answer["results"]] == [r["id"] for r in expected[0]["results"]]
