"""`retrieval reranker` end to end on a tiny checkpoint (`tiny_reranker` in tests/conftest.py, trained once).

The command's refusals are `tests/cli/test_reranker_cli.py`'s."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from retrieval.core.learned_rerank import MANIFEST_FILE, WEIGHTS_FILE, read_reranker
from retrieval.errors import UserError
from retrieval.runtime.files import file_sha256

pytestmark = pytest.mark.slow


def test_the_directory_records_its_checkpoint_blend_validation_and_onnx_parity(tiny_reranker):
    checkpoint, _, directory, printed = tiny_reranker
    files = read_reranker(directory)
    manifest = files.manifest
    assert manifest.checkpoint_sha256 == file_sha256(checkpoint)
    assert manifest.depth in (2, 4) and manifest.weight in (0.0, 0.5, 1.0)
    assert manifest.validation.queries > 0 and manifest.train_seconds > 0
    assert {(row["depth"], row["weight"]) for row in manifest.grid} >= {(2, 0.5), (4, 1.0)}
    assert manifest.parity["probability_max_abs_diff"] < 1e-4
    assert manifest.verdict() in printed
    best = max(manifest.grid, key=lambda row: (row["map@r"], row["recall@1"]))
    assert manifest.validation.map_at_r == best["map@r"]
    assert not list(directory.parent.glob(f".{directory.name}-*"))  # no scratch folder left behind


def test_a_changed_file_is_refused(tiny_reranker, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_reranker[2], copy)
    weights = copy / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(UserError, match="is not the file manifest.json records"):
        read_reranker(copy)


def test_the_pytorch_weights_load_into_the_pair_model_and_match_onnx(tiny_reranker):
    from retrieval.checkpoint import Checkpoint
    from retrieval.core.preprocess import Preprocess
    from retrieval.evaluate.learned_rerank import load_pair_model, pair_probabilities
    from retrieval.export.reranker_onnx import OnnxPairScorer

    checkpoint, _, directory, _ = tiny_reranker
    files = read_reranker(directory)
    model = load_pair_model(files, Checkpoint.read(checkpoint).embedder(), 3)
    scorer = OnnxPairScorer(directory, Preprocess.read(directory / "preprocess.json"), device="cpu")
    images = np.random.default_rng(1).standard_normal((4, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        described = model.describe(torch.from_numpy(images)).numpy()
    exported = scorer.describe_inputs(images)
    np.testing.assert_allclose(exported, described, atol=1e-4)
    cosines = np.array([0.9, 0.1, -0.3, 0.5], dtype=np.float32)
    reference = pair_probabilities(model.head, described, described[::-1].copy(), cosines)
    np.testing.assert_allclose(scorer.probabilities(exported, exported[::-1], cosines), reference, atol=1e-5)


def test_a_reranker_of_another_checkpoint_is_refused(tiny_reranker, other_checkpoint):
    manifest = read_reranker(tiny_reranker[2]).manifest
    with pytest.raises(UserError, match="this re-ranker belongs to checkpoint .* not to other.pt"):
        manifest.belongs_to(file_sha256(other_checkpoint), "other.pt")
    assert json.loads((tiny_reranker[2] / MANIFEST_FILE).read_text())["format"] == 1


def test_training_never_reads_the_test_split(tiny_reranker):
    """`tiny_reranker` trains while every test image file holds garbage: reading one would fail the run, one line
    `cannot read image ...`; the run writes its re-ranker, and the test files are restored after."""
    checkpoint, dataset, directory, printed = tiny_reranker
    assert f"re-ranker written to {directory}" in printed
    from PIL import Image

    for path in (dataset.parent / "images").glob("test_*"):
        Image.open(path).verify()  # restored intact for the tests that evaluate


@pytest.mark.parametrize(("base", "recorded"), [("dba", None), ("dba:k=2,alpha=0", "dba:k=2,alpha=0")])
def test_a_reranker_over_dba_records_the_dba_it_was_chosen_over(base, recorded, tiny_reranker, tmp_path):
    """`reranker.base=dba` chooses k and alpha on the blend's split (from dba's grid); a given spec is kept."""
    from retrieval.core.rerank import DatabaseAugmentation, augmentation_at_build
    from retrieval.reranker.build import RerankerRequest, train_reranker
    from tests.conftest import TINY_RERANKER_SETTINGS

    checkpoint, dataset, _, _ = tiny_reranker
    overrides = (f"data.path={dataset}", *TINY_RERANKER_SETTINGS, "reranker.backbone=frozen", f"reranker.base={base}")
    manifest = train_reranker(RerankerRequest(checkpoint, tmp_path / "r", overrides=overrides)).manifest
    assert manifest.settings["base"] == base and manifest.base is not None
    chosen = augmentation_at_build(manifest.base)
    assert manifest.base == chosen.spec() and manifest.base_augmentation() == chosen
    if recorded is None:
        grid = DatabaseAugmentation.grid_values
        assert chosen.k in grid["k"] and chosen.alpha in grid["alpha"]
    else:
        assert chosen == augmentation_at_build(recorded)
    assert read_reranker(tmp_path / "r").manifest.base == manifest.base


def test_an_index_must_store_the_vectors_the_blend_was_chosen_on_unless_nothing_is_applied(tiny_reranker):
    from retrieval.core.learned_rerank import RerankerManifest
    from retrieval.core.rerank import stored_augmentation

    record = json.loads((tiny_reranker[2] / MANIFEST_FILE).read_text())
    over_dba = RerankerManifest.model_validate({**record, "depth": 4, "weight": 0.5, "base": "dba:k=5,alpha=0"})
    over_dba.check_index(stored_augmentation("dba:alpha=0.0,k=5"))  # the same augmentation, written otherwise
    for other in (None, "dba:k=3,alpha=0"):
        with pytest.raises(UserError, match="build the index with --rerank dba:k=5,alpha=0"):
            over_dba.check_index(stored_augmentation(other))
    plain = RerankerManifest.model_validate({**record, "depth": 4, "weight": 0.5, "base": None})
    plain.check_index(stored_augmentation(None))
    with pytest.raises(UserError, match="build the index without --rerank"):
        plain.check_index(stored_augmentation("dba:k=2,alpha=3"))
    not_applied = RerankerManifest.model_validate({**record, "weight": 0.0, "base": "dba:k=5,alpha=0"})
    for index in (None, "dba:k=2,alpha=3"):
        not_applied.check_index(stored_augmentation(index))  # the embedding alone: any index's own search
    assert "over dba:k=5,alpha=0 chosen on validation" in over_dba.verdict()
