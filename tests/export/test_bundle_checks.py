"""An undamaged export embeds finite unit vectors through `OnnxEncoder`.

Damaged exports, refused in one line by `index build --model` and `serve --model`, are the commands' tests:
`tests/cli/test_export_bundle_checks_cli.py`."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from retrieval.export.onnx_encoder import OnnxEncoder


@pytest.fixture(scope="module")
def images(tmp_path_factory, digits_images) -> Path:
    """Ten digits test images."""
    folder = tmp_path_factory.mktemp("images")
    for path in digits_images[::90]:
        shutil.copy(path, folder / path.name)
    return folder


def test_an_undamaged_export_embeds_finite_unit_vectors(exported, images) -> None:
    encoder = OnnxEncoder.from_export(exported, device="cpu")
    embeddings = encoder.embed_files(sorted(images.iterdir()), progress=False).embeddings
    assert embeddings.shape == (10, encoder.dim) and np.isfinite(embeddings).all()
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1, atol=1e-4)
