"""One small model of each timm family end to end at 32 px: build, a training step, evaluate, ONNX export.

The families differ where the embedder meets them: MobileNetV3 widens its features after pooling
(`conv_head`: 288 -> 1024 channels for mobilenetv3_small_050), EfficientNet convolves before,
ConvNeXt normalizes in its head, and a ViT gives tokens, not maps, and needs its position grid
resampled to 2x2 patches at 32 px.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config, ModelConfig, config_to_dict
from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from retrieval.export.onnx_export import PARITY_TOLERANCE, export_checkpoint
from retrieval.losses.registry import build_loss
from retrieval.models import Embedder

# timm's smallest model of each family (pooling: timm's `avg`, which runs each model's own head).
FAMILIES = {
    "resnet": "resnet10t",
    "mobilenetv3": "mobilenetv3_small_050",
    "efficientnet": "tf_efficientnet_lite0",
    "regnet": "regnetx_002",
    "convnext": "convnext_atto",
    "vit": "vit_tiny_patch16_224",
}
CLASSES, PER_CLASS = 4, 2


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, csv_dataset_factory) -> Path:
    return csv_dataset_factory(tmp_path_factory.mktemp("families"))


def _config(backbone: str, dataset: Path) -> Config:
    """A run config of `backbone` on the CSV dataset at 32 px, from scratch, as `retrieval train` would save it."""
    config = Config(model=ModelConfig(backbone=backbone, embedding_dim=16, pooling="avg", pretrained=False))
    config.data = config.data.model_copy(
        update=dict(name="csv", path=str(dataset), image_size=32, num_workers=0, val_fraction=0.0, eval_batch_size=8)
    )
    return config


@dataclass
class Trained:
    """A family's embedder after 2 Adam steps of Proxy-NCA on 8 random images, and its checkpoint."""

    backbone: str
    model: Embedder
    first_gradients: dict[str, torch.Tensor]  # of the first step, by parameter name
    losses: list[float]  # before each step
    checkpoint: Path


@pytest.fixture(scope="module", params=list(FAMILIES.values()))
def trained(request, dataset, tmp_path_factory) -> Trained:
    backbone = request.param
    config = _config(backbone, dataset)
    torch.manual_seed(0)
    model = Embedder(**config.model.model_dump())
    loss = build_loss("proxy_nca", {}, CLASSES, model.embedding_dim)
    optimizer = torch.optim.Adam([*model.parameters(), *loss.parameters()], lr=1e-5)  # small: a ViT diverges at 1e-3
    images, labels = torch.rand(CLASSES * PER_CLASS, 3, 32, 32), torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    losses, gradients = [], {}
    for step in range(2):
        optimizer.zero_grad()
        value = loss(model(images), labels)
        value.backward()
        if step == 0:
            gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        losses.append(value.item())
    path = tmp_path_factory.mktemp(backbone) / "best.pt"
    Checkpoint(model.state_dict(), config.model, config_to_dict(config), num_classes=CLASSES).save(path)
    return Trained(backbone, model, gradients, losses, path)


def test_the_head_takes_what_the_backbone_gives():
    """The Linear head's width is what the pooled features measure, not `num_features` (the reported crash)."""
    mobilenet = Embedder("mobilenetv3_small_050", embedding_dim=16, pooling="avg")
    assert mobilenet.backbone.num_features == 288 and mobilenet.head.in_features == 1024  # after its conv_head
    assert Embedder("mobilenetv3_small_050", embedding_dim=16, pooling="avgmax").head.in_features == 288
    assert Embedder("vit_tiny_patch16_224", embedding_dim=None, pooling="token").embedding_dim == 192


def test_a_training_step_reaches_every_parameter_and_lowers_the_loss(trained: Trained):
    unreached = [name for name, _ in trained.model.named_parameters() if name not in trained.first_gradients]
    assert not unreached, f"{trained.backbone}: no gradient for {unreached[:5]}"
    assert all(torch.isfinite(gradient).all() for gradient in trained.first_gradients.values())
    assert trained.losses[-1] < trained.losses[0], f"{trained.backbone}: {trained.losses}"


def test_the_checkpoint_evaluates(trained: Trained):
    # What `evaluate --checkpoint CKPT --set train.threads=1` runs; it prints the report's text (the command's
    # printing of it is tests/cli/test_evaluate_cli.py's).
    report = run_evaluation(EvaluationRequest(trained.checkpoint, overrides=("train.threads=1",)))
    out = report.text().strip().splitlines()
    assert re.fullmatch(r"Recall@1: \d\.\d{4}", out[-5]) and re.fullmatch(r"MAP@R: \d\.\d{4}", out[-1])


@pytest.mark.slow
def test_the_checkpoint_exports_to_onnx_with_parity(trained: Trained, tmp_path):
    manifest = export_checkpoint(trained.checkpoint, tmp_path / "export")
    difference = manifest.parity.embedding_max_abs_diff
    print(f"{trained.backbone}: ONNX max abs difference {difference:.2e}")
    assert manifest.backbone == trained.backbone and manifest.embedding_dim == 16
    assert difference <= PARITY_TOLERANCE
