"""The tiny pretraining settings the pretrain tests share: `TINY_BACKBONE` at 16 px, batches of 8, a small head."""

from __future__ import annotations

from tests.conftest import TINY_BACKBONE

TINY = (
    f"model.backbone={TINY_BACKBONE}",
    "model.pooling=avg",
    "data.image_size=16",
    "data.num_workers=0",
    "train.threads=1",
    "train.device=cpu",
    "pretrain.batch_size=8",
    "pretrain.hidden_dim=32",
    "pretrain.projection_dim=16",
)
