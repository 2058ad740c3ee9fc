"""An undamaged export embeds finite unit vectors through `OnnxEncoder`.

Damaged exports, refused in one line by `index build --model` and `serve --model`, are the commands' tests:
`tests/cli/test_export_bundle_checks_cli.py`."""

from __future__ import annotations

import numpy as np

from retrieval.export.onnx_encoder import OnnxEncoder


def test_an_undamaged_export_embeds_finite_unit_vectors(exported, ten_digits) -> None:
    encoder = OnnxEncoder.from_export(exported, device="cpu")
    embeddings = encoder.embed_files(sorted(ten_digits.iterdir()), progress=False).embeddings
    assert embeddings.shape == (10, encoder.dim) and np.isfinite(embeddings).all()
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1, atol=1e-4)
