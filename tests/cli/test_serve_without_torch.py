"""`retrieval serve --model BUNDLE` (and `--backend URI`) answers searches without torch or the training packages."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.onnx_export import export_checkpoint
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.upload import export_index
from tests.cli.serve_without_torch import serve_without_torch


@pytest.mark.slow  # exports a model (seconds of torch.onnx) and starts an interpreter with the web stack
def test_serve_with_an_export_answers_searches_without_torch(tmp_path: Path, checkpoint_factory, csv_dataset_factory):
    """`serve --index INDEX --model BUNDLE`, and `serve --backend URI` of the index exported to Qdrant."""
    bundle, index_dir = tmp_path / "onnx", tmp_path / "index"
    checkpoint = checkpoint_factory(tmp_path / "best.pt")
    # What `export --format onnx`, `index build --model` and `index export` run; then `serve` itself, below.
    export_checkpoint(checkpoint, bundle)
    csv_path = csv_dataset_factory(tmp_path / "data", train_classes=2, test_classes=2, per_class=3)
    build_index(IndexBuildRequest(index_dir, EncoderChoice(model=bundle), csv=csv_path, kind="flat"))
    uri = f"qdrant+local://{tmp_path / 'qdrant'}?collection=gallery"
    export_index(index_dir, parse_database_uri(uri), progress=False)
    image = tmp_path / "data" / "images" / "test_100_0.png"
    servings = [["--index", str(index_dir), "--model", str(bundle)], ["--backend", uri]]
    result = serve_without_torch(image, servings)
    assert len(result["answers"]) == len(servings)
    for answer in result["answers"]:
        status, found = answer["image"]
        assert status == 200 and found["query"] == {"type": "image"}
        assert found["results"][0]["path"].endswith("test_100_0.png")  # the image finds itself first
        assert found["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
        status, found = answer["vector"]
        assert status == 200 and found["query"] == {"type": "vector"} and len(found["results"]) == 2
    assert result["loaded"] == []
