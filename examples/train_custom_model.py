"""Train your own `nn.Module` on your own torch Dataset with a loss from the registry: no YAML, no `Config`.

A small CNN embeds scikit-learn's 8x8 digits into 32-d unit vectors with the Proxy-NCA loss; a
stratified half of each digit trains, the other half is the test set. The typed `TrainConfig` and
`DataConfig` dataclasses carry the knobs (optimizer, schedule, batches); `assemble_training` wires
model, loss and data into the parts the `Trainer` runs. The model needs only `forward(images) ->
(B, D)`: no `backbone` (so `freeze_backbone_epochs=0`), no `data_config()`, and no checkpoint
files are written for it (the selected epoch's weights stay in memory).

    python examples/train_custom_model.py [--epochs 2] [--out runs/custom]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from retrieval.config import DataConfig, TrainConfig
from retrieval.data import EvalSplit, RetrievalData
from retrieval.losses import build_loss
from retrieval.train.builders import assemble_training
from retrieval.train.trainer import Trainer, TrainResult

EMBEDDING_DIM = 32


class SmallCNN(nn.Module):
    """`(B, 1, 8, 8)` images -> `(B, EMBEDDING_DIM)` unit vectors."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, EMBEDDING_DIM)

    def forward(self, images: Tensor) -> Tensor:
        return F.normalize(self.head(self.features(images).flatten(1)), dim=1)


def digits_data() -> RetrievalData:
    """Digits as `(image, label)` tensors: even-numbered images of each class train, the others are the test set."""
    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    labels = digits.target.astype(np.int64)
    train = np.arange(len(labels)) % 2 == 0
    test = EvalSplit(TensorDataset(images[~train], torch.from_numpy(labels[~train])), labels[~train])
    train_set = TensorDataset(images[train], torch.from_numpy(labels[train]))
    return RetrievalData(train=train_set, train_labels=labels[train], num_classes=10, test=test)


def train(epochs: int, out: Path) -> TrainResult:
    """Train the CNN for `epochs` and return the test metrics of the last epoch (no validation split)."""
    torch.manual_seed(0)
    model, data = SmallCNN(), digits_data()
    loss = build_loss("proxy_nca", {"scale": 16.0}, num_classes=data.num_classes, embedding_dim=EMBEDDING_DIM)
    knobs = TrainConfig(
        epochs=epochs, lr=3e-3, warmup_epochs=0, freeze_backbone_epochs=0, freeze_bn=False, device="cpu", amp="none"
    )
    loading = DataConfig(batch_size=64, eval_batch_size=256, num_workers=0)
    parts = assemble_training(model, loss, data, knobs, loading)
    return Trainer(parts, knobs, out).fit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/custom"))
    args = parser.parse_args()
    result = train(args.epochs, args.out)
    print(f"Recall@1: {result.test['recall@1']:.4f}")
    print(f"MAP@R: {result.test['map@r']:.4f}")


if __name__ == "__main__":
    main()
