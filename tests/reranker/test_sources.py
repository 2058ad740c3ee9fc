"""Where a re-ranker's pairs are mined and its blend chosen (`retrieval.reranker.sources`, `reranker.pairs_from`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from retrieval.core.learned_rerank import MANIFEST_FILE
from retrieval.data.datasets import EvalSplit, RetrievalData
from retrieval.data.digits import DigitsDataset
from retrieval.errors import UserError
from retrieval.reranker.build import RerankerRequest, train_reranker
from retrieval.reranker.sources import pair_source
from tests.conftest import TINY_RERANKER_SETTINGS


def _marked(value: float):
    """A transform that fills the image with `value`: which transform read an item shows in its pixels."""
    return lambda image: torch.full_like(image, value)


def _data(val_labels: np.ndarray) -> RetrievalData:
    """Training split of 3 classes (training transform 1.0), validation split `val_labels` (eval transform 2.0);
    its even rows queries, every third row outside the gallery. The test split fails if read."""
    images = torch.zeros(len(val_labels), 3, 2, 2)
    train_labels = np.arange(6) % 3
    val = EvalSplit(
        DigitsDataset(images, val_labels, _marked(2.0)),
        val_labels,
        query_mask=np.arange(len(val_labels)) % 2 == 0,
        gallery_mask=np.arange(len(val_labels)) % 3 != 0,
        train_class=np.full(len(val_labels), -1),
        class_names=[f"c{c}" for c in range(int(val_labels.max()) + 1)],
    )
    train = DigitsDataset(torch.zeros(6, 3, 2, 2), train_labels, _marked(1.0))
    return RetrievalData(train, train_labels, 3, EvalSplit(None, np.zeros(0)), val)  # type: ignore[arg-type]


def test_validation_mines_half_the_classes_and_blends_on_the_other_half_row_aligned():
    labels = np.repeat(np.arange(7), 4)
    data = _data(labels)
    source = pair_source(data, data.val, "validation", seed=3)
    mined, blended = set(source.labels), set(source.blend.labels)
    assert len(mined) == 3 and len(blended) == 4 and not mined & blended and mined | blended == set(range(7))
    rows = np.flatnonzero(np.isin(labels, sorted(blended)))
    np.testing.assert_array_equal(source.blend.labels, labels[rows])
    np.testing.assert_array_equal(source.blend.query_mask, rows % 2 == 0)
    np.testing.assert_array_equal(source.blend.gallery_mask, rows % 3 != 0)
    assert source.blend.class_names == data.val.class_names and len(source.blend.dataset) == len(rows)
    assert [source.blend.dataset[i][1] for i in range(len(rows))] == list(labels[rows])
    # The mined images: eval transform to embed them, the training transform to train on them.
    assert len(source.eval_images) == len(source.train_images) == len(source.labels) == 4 * 3
    assert source.eval_images[0][0].unique().tolist() == [2.0]
    assert source.train_images[0][0].unique().tolist() == [1.0]
    assert data.val.dataset.transform(torch.zeros(1)).item() == 2.0  # the validation split itself is unchanged
    again = pair_source(data, data.val, "validation", seed=3)
    assert set(again.labels) == mined  # the halves follow train.seed
    assert any(set(pair_source(data, data.val, "validation", seed=s).labels) != mined for s in range(4, 10))


def test_train_mines_the_training_split_through_the_eval_transform_and_blends_on_all_of_validation():
    data = _data(np.repeat(np.arange(4), 2))
    source = pair_source(data, data.val, "train", seed=0)
    assert source.blend is data.val and source.train_images is data.train
    np.testing.assert_array_equal(source.labels, data.train_labels)
    assert source.eval_images[0][0].unique().tolist() == [2.0]
    assert data.train[0][0].unique().tolist() == [1.0]


def test_validation_with_too_few_classes_or_multi_label_data_is_refused():
    data = _data(np.repeat(np.arange(3), 4))
    with pytest.raises(UserError, match="this validation split has 3 class"):
        pair_source(data, data.val, "validation", seed=0)
    data.val.labels = np.eye(3, dtype=bool)[np.repeat(np.arange(3), 4)]
    with pytest.raises(UserError, match="multi-label"):
        pair_source(data, data.val, "validation", seed=0)


@pytest.mark.slow
def test_a_reranker_of_training_pairs_records_its_source_and_blends_on_all_of_validation(tiny_reranker, tmp_path):
    """`tiny_reranker` mines half the validation classes (the default); here the training split is mined instead."""
    checkpoint, dataset, on_validation, _ = tiny_reranker
    overrides = (
        f"data.path={dataset}",
        *TINY_RERANKER_SETTINGS,
        "reranker.pairs_from=train",
        "reranker.backbone=frozen",
    )
    report = train_reranker(RerankerRequest(checkpoint, tmp_path / "reranker", overrides=overrides))
    on_train = json.loads((tmp_path / "reranker" / MANIFEST_FILE).read_text())
    written = json.loads((on_validation / MANIFEST_FILE).read_text())
    assert written["settings"]["pairs_from"] == "validation" and on_train["settings"]["pairs_from"] == "train"
    # 6 validation classes of 2 images: pairs from 3 of them, the blend chosen on the other 3's 6 queries.
    assert written["validation"]["queries"] == 6 < on_train["validation"]["queries"]
    assert written["pairs"]["total"] < on_train["pairs"]["total"]
    assert report.directory == tmp_path / "reranker"
