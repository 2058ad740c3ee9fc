"""Checkpoints of untrained digits models, for the evaluation tests here and in `tests/cli`."""

from __future__ import annotations

import torch

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config, ModelConfig, config_to_dict
from retrieval.losses import build_loss
from retrieval.models import Embedder


def write_digits_checkpoint(path, loss_name: str):
    """A digits checkpoint of an untrained resnet10t (16 px, 16-d) and its loss's state: fast to evaluate."""
    torch.manual_seed(0)
    model_config = ModelConfig(backbone="resnet10t", embedding_dim=16, pretrained=False)
    config = Config(model=model_config)
    config.data.name, config.data.image_size, config.data.val_fraction = "digits", 16, 0.2
    config.data.num_workers = 0
    config.loss.name, config.train.device = loss_name, "cpu"
    model = Embedder(**model_config.model_dump())
    loss = build_loss(loss_name, {}, 10, 16)
    Checkpoint(model.state_dict(), model_config, config_to_dict(config), 10, loss=loss.state_dict()).save(path)
    return path
