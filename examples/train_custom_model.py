"""Train your own `nn.Module` on your own torch Dataset with a loss from the registry: no YAML file.

A small CNN embeds scikit-learn's 8x8 digits into 32-d unit vectors with the Proxy-NCA loss; a
stratified half of each digit trains, the other half is the test set. `@register_backbone` makes
the CNN a `model.backbone` name, as timm's `register_model` does for timm's models: the `Embedder`
adds the pooling, the Linear head and the L2 normalization, and the run writes checkpoints the
toolkit can rebuild, so the model goes on to `retrieval export`, `index build` and `serve`
(`tests/train/test_custom_backbone.py` does all three). A process that never imports this file
(the command line) finds the builder through the `retrieval.backbones` entry-point group of the
package that holds it (`retrieval/models/backbones.py`).

The typed config sections carry the knobs (optimizer, schedule, batches); `assemble_training`
wires model, loss and data into the parts the `Trainer` runs.

    python examples/train_custom_model.py [--epochs 2] [--out runs/custom]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from retrieval.config import Config, DataConfig, ModelConfig, TrainConfig, config_to_dict
from retrieval.data import EvalSplit, RetrievalData
from retrieval.losses import build_loss
from retrieval.models import Embedder
from retrieval.models.backbones import register_backbone
from retrieval.train.builders import assemble_training
from retrieval.train.result import RunResult
from retrieval.train.trainer import Trainer

EMBEDDING_DIM = 32
# The model as the toolkit rebuilds it: the registered CNN, average-pooled, a Linear head to 32-d.
MODEL = ModelConfig(backbone="small_cnn", embedding_dim=EMBEDDING_DIM, pooling="avg", in_chans=1, pretrained=False)
LOADING = DataConfig(name="digits", image_size=8, batch_size=64, eval_batch_size=256, num_workers=0)


class SmallCNN(nn.Module):
    """`(B, C, 8, 8)` images -> `(B, 32, 8, 8)` feature maps."""

    # Preprocessing as timm reads it: pixels scaled to [0, 1] and not normalized, as `digits_data` gives them.
    pretrained_cfg = {"input_size": (1, 8, 8), "mean": (0.0,), "std": (1.0,), "crop_pct": 1.0}

    def __init__(self, in_chans: int = 1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_chans, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
        )

    def forward(self, images: Tensor) -> Tensor:
        return self.features(images)


@register_backbone("small_cnn")
def small_cnn(*, pretrained: bool = False, in_chans: int = 1) -> SmallCNN:
    """The CNN from scratch (it has no pretrained weights to load)."""
    return SmallCNN(in_chans)


def digits_data() -> RetrievalData:
    """Digits as `(image, label)` tensors: even-numbered images of each class train, the others are the test set."""
    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    labels = digits.target.astype(np.int64)
    train = np.arange(len(labels)) % 2 == 0
    test = EvalSplit(TensorDataset(images[~train], torch.from_numpy(labels[~train])), labels[~train])
    train_set = TensorDataset(images[train], torch.from_numpy(labels[train]))
    return RetrievalData(train=train_set, train_labels=labels[train], num_classes=10, test=test)


def train(epochs: int, out: Path) -> RunResult:
    """Train the CNN for `epochs` and return the test metrics of the last epoch (no validation split)."""
    torch.manual_seed(0)
    model, data = Embedder(**MODEL.model_dump()), digits_data()
    loss = build_loss("proxy_nca", {"scale": 16.0}, num_classes=data.num_classes, embedding_dim=EMBEDDING_DIM)
    knobs = TrainConfig(
        epochs=epochs, lr=3e-3, warmup_epochs=0, freeze_backbone_epochs=0, freeze_bn=False, device="cpu", amp="none"
    )
    parts = assemble_training(model, loss, data, knobs, LOADING)
    # The model and run config make checkpoints/best.pt one that export, index build and serve read.
    run_config = config_to_dict(Config(model=MODEL, data=LOADING, train=knobs))
    return Trainer(parts, knobs, out, MODEL, run_config).fit()


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
