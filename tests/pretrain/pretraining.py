"""The tiny pretraining settings the pretrain tests share: resnet10t at 16 px, batches of 8, a small head."""

from __future__ import annotations

TINY = (
    "model.backbone=resnet10t",
    "model.pooling=avg",
    "data.image_size=16",
    "data.num_workers=0",
    "train.threads=1",
    "train.device=cpu",
    "pretrain.batch_size=8",
    "pretrain.hidden_dim=32",
    "pretrain.projection_dim=16",
)
