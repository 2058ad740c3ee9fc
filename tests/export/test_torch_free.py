"""An export is embedded, and its index searched, in a process that never imports torch, timm or torchvision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.inference.image_encoder import ImageEncoder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# Embeds files with the model the index records (nothing but the index directory is named), then searches.
_EMBED_AND_SEARCH = """
import json, sys
import numpy as np
from retrieval.export.onnx_encoder import onnx_encoder_for_index
from retrieval.index import SearchIndex
index_dir, out, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
index = SearchIndex.load(index_dir)
encoder = onnx_encoder_for_index(index.manifest.model, None, device="cpu")
embeddings = encoder.embed_files(paths, batch_size=3, progress=False).embeddings
np.save(out, embeddings)
scores, ids = index.search(embeddings, k=1)
print(json.dumps({
    "top1": [row["path"] for row in index.metadata_for(ids[:, 0])],
    "loaded": sorted(name for name in ("torch", "timm", "torchvision") if name in sys.modules),
}))
"""


def test_embedding_and_searching_with_an_export_imports_no_torch(exported, digits_checkpoint, digits_images, tmp_path):
    index_dir = tmp_path / "index"
    folder = digits_images[0].parents[1]
    build_index(IndexBuildRequest(index_dir, EncoderChoice(model=exported), images=folder, kind="flat"))
    paths = [str(path.resolve()) for path in digits_images[:7]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "embeddings.npy"
    done = subprocess.run(
        [sys.executable, "-c", _EMBED_AND_SEARCH, str(index_dir), str(out), *paths],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["top1"] == paths  # each image finds itself
    expected = ImageEncoder.from_checkpoint(digits_checkpoint, device="cpu").embed_files(paths, progress=False)
    assert np.abs(np.load(out) - expected.embeddings).max() < 1e-4
