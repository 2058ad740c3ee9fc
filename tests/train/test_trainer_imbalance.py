"""The trainer's long-tail options: `data.sampler: balanced` and `loss.class_weights` from training counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import WeightedRandomSampler

from retrieval.config import load_config
from retrieval.data.longtail import make_longtail_csv
from retrieval.errors import UserError
from retrieval.losses.class_weights import class_weights
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_BACKBONE

pytestmark = pytest.mark.slow

TINY = [
    "data.name=csv",
    f"model.backbone={TINY_BACKBONE}",
    "model.embedding_dim=8",
    "model.pretrained=false",
    "data.image_size=16",
]
TINY += ["data.num_workers=0", "data.batch_size=4", "train.epochs=1", "train.freeze_backbone_epochs=0"]
TINY += ["train.freeze_bn=false", "train.device=cpu", "data.val_fraction=0", "train.plots=false"]


@pytest.fixture
def longtail_csv(tmp_path: Path, csv_dataset_factory) -> Path:
    source = csv_dataset_factory(tmp_path / "data", train_classes=4, test_classes=3, per_class=8)
    out = tmp_path / "data" / "lt.csv"
    make_longtail_csv(source, out, 8.0)  # 8, 4, 2, 1 training images
    return out


def test_balanced_sampler_and_class_weights_reach_the_loader_and_the_loss(tmp_path: Path, longtail_csv: Path) -> None:
    overrides = [*TINY, f"data.path={longtail_csv}", "data.sampler=balanced", "loss.name=proxy_nca"]
    config = load_config(None, [*overrides, "loss.class_weights=effective_number", "loss.beta=0.9"])
    trainer = Trainer.from_config(config, tmp_path / "run")
    assert isinstance(trainer.parts.loader.sampler, WeightedRandomSampler)
    counts = np.bincount(trainer.parts.data.train_labels)
    assert sorted(counts.tolist()) == [1, 2, 4, 8]
    torch.testing.assert_close(trainer.parts.loss.class_weights, class_weights(counts, "effective_number", 0.9))
    result = trainer.fit()
    assert np.isfinite(result.test["map@r"])
    # A resumed trainer rebuilds the same weights: they come from the config and the data, and are in the checkpoint.
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)["loss"]
    torch.testing.assert_close(saved["class_weights"], trainer.parts.loss.class_weights)


def test_pair_losses_refuse_the_balanced_sampler(tmp_path: Path, longtail_csv: Path) -> None:
    config = load_config(None, [*TINY, f"data.path={longtail_csv}", "data.sampler=balanced", "loss.name=triplet"])
    with pytest.raises(UserError, match="set data.sampler=pk .* instead of balanced"):
        Trainer.from_config(config, tmp_path / "run")
