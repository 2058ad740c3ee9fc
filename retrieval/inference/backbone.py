"""A timm backbone as a model without training: its pooled features, L2-normalized, wrapped as a `Checkpoint`.

The baseline every trained model should beat (open-metric-learning's "you may not need to
train"). `retrieval evaluate --backbone` and `retrieval index build --backbone` score and index
it through the same path as a trained checkpoint (`Checkpoint.embedder`, `ImageEncoder`): only
where the weights come from differs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config, config_to_dict
from retrieval.models import Embedder
from retrieval.runtime.environment import torch_seeded

__all__ = ["backbone_checkpoint", "backbone_config"]


def backbone_config(config: Config, backbone: str, weights: Path | None = None) -> Config:
    """`config` with its model replaced by the timm model `backbone`: pooled features, no head (`embedding_dim: null`).

    The weights come from the local state dict `weights`; without one, from timm's hub when
    `model.pretrained` is true (offline: the usual error saying how to give a file), else the
    network is untrained (random at `train.seed`), which is allowed and warned about. Pooling,
    channels, data and evaluation transform stay the config's.
    """
    model = config.model.model_copy(
        update={"backbone": backbone, "embedding_dim": None, "weights": None if weights is None else str(weights)}
    )
    if weights is None and not model.pretrained:
        warnings.warn(
            f"--backbone {backbone} without --weights and with model.pretrained=false is an untrained, random "
            "network: a floor, not a baseline; give --weights FILE or --set model.pretrained=true (needs network)",
            stacklevel=2,
        )
    return config.model_copy(update={"model": model})


def backbone_checkpoint(config: Config) -> Checkpoint:
    """The model `config.model` describes, with its pretrained (or seeded random) weights, as an in-memory `Checkpoint`.

    Raises:
        UserError: an unknown backbone, a weights file that is missing or does not fit it, or no
            weights offline (from `retrieval.models.create_backbone`).
    """
    with torch_seeded(config.train.seed):
        model = Embedder(**config.model.model_dump())
    return Checkpoint(model.state_dict(), config.model, config_to_dict(config), num_classes=0)
