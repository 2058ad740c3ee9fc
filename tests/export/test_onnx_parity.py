"""The exported model embeds the digits test images as PyTorch does: 1e-4 max abs, the same top-10 neighbours."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from PIL import ImageOps

from retrieval.export.onnx_encoder import OnnxEncoder
from retrieval.export.onnx_export import export_checkpoint
from retrieval.images import load_image
from retrieval.inference.image_encoder import ImageEncoder
from tests.conftest import TINY_BACKBONE


def _top10(embeddings: np.ndarray) -> list[set[int]]:
    """Brute-force top-10 neighbours of every row among the others (inner product), as sets.

    Sets: within a top-10, two neighbours a few 1e-6 apart may swap ranks with rounding (the
    closest pair of the digits reference is 2e-6 apart, next to a 4e-6 embedding difference).
    """
    scores = embeddings @ embeddings.T
    np.fill_diagonal(scores, -np.inf)
    return [set(row) for row in np.argsort(-scores, axis=1, kind="stable")[:, :10].tolist()]


@pytest.fixture(scope="module")
def reference(digits_checkpoint, digits_images) -> np.ndarray:
    encoder = ImageEncoder.from_checkpoint(digits_checkpoint, device="cpu")
    return encoder.embed_files(digits_images, batch_size=64, progress=False).embeddings


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 7])
def test_digits_embeddings_match_pytorch_within_1e_4(exported, digits_images, reference, batch_size):
    encoder = OnnxEncoder.from_export(exported, device="cpu")
    embedded = encoder.embed_files(digits_images, batch_size=batch_size, progress=False)
    assert embedded.positions.tolist() == list(range(len(digits_images))) and not embedded.failures
    assert embedded.embeddings.shape == reference.shape == (899, 16)
    assert np.abs(embedded.embeddings - reference).max() < 1e-4
    assert _top10(embedded.embeddings) == _top10(reference)


def test_the_manifest_records_source_opset_dimension_and_parity(exported, digits_checkpoint):
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["source_checkpoint_sha256"] == hashlib.sha256(digits_checkpoint.read_bytes()).hexdigest()
    assert manifest["opset"] == 18 and manifest["embedding_dim"] == 16 and manifest["backbone"] == TINY_BACKBONE
    assert manifest["files"]["model.onnx"] == hashlib.sha256((exported / "model.onnx").read_bytes()).hexdigest()
    assert manifest["parity"]["embedding_max_abs_diff"] < 1e-4
    assert manifest["parity"]["preprocess_max_abs_diff"] == 0.0
    preprocess = json.loads((exported / "preprocess.json").read_text())
    assert preprocess["image_size"] == 32 and preprocess["resize_mode"] == "resize" and preprocess["channels"] == "RGB"


@pytest.mark.slow
def test_flip_average_is_part_of_the_exported_graph(checkpoint_factory, tmp_path, digits_images):
    """A flip_average model's export embeds an image and its mirror alike, and matches PyTorch."""
    checkpoint = checkpoint_factory(tmp_path / "flip.pt", flip_average=True)
    manifest = export_checkpoint(checkpoint, tmp_path / "flip")
    assert manifest.flip_average is True
    exported = OnnxEncoder.from_export(tmp_path / "flip", device="cpu")
    images = [load_image(path) for path in digits_images[:5]]
    mirrored = [ImageOps.mirror(image) for image in images]
    np.testing.assert_allclose(exported.embed_images(images), exported.embed_images(mirrored), atol=1e-6)
    expected = ImageEncoder.from_checkpoint(checkpoint, device="cpu").embed_images(images)
    assert np.abs(exported.embed_images(images) - expected).max() < 1e-4
