"""The plain baseline: a timm backbone + a pytorch-metric-learning proxy loss, glued by hand.

What a user who does not use this toolkit writes (it imports nothing from `retrieval`), so
`tools/dev_benchmark.py` can show whether the toolkit beats it at the same model, image size,
batch, epochs and thread count:

- model: `timm.create_model(backbone, pretrained=False, num_classes=0)` -> Linear(-> 128) -> L2 norm;
- loss: PML `ProxyNCALoss` or `ProxyAnchorLoss` with their default hyper-parameters (only
  num_classes and embedding_size given);
- optimizer: one Adam over the model's and the loss's parameters (the proxies), one constant
  lr for all (`--proxy-lr-mult` gives the proxies their own group, as PML's Proxy-Anchor
  example does with 100x); no schedule, no weight decay, no warm-up, no model selection;
- data: images from a dataset CSV (`path,label,split[,is_query,is_gallery]`) converted to RGB;
  train = Resize + light RandomAffine (10 degrees, 10% shift, 0.9-1.1 scale, torchvision's
  default black fill, no flip) + ImageNet normalization; eval = Resize + normalization;
  shuffled batches, last partial batch dropped;
- evaluation after the last epoch on the test rows with PML's `AccuracyCalculator`:
  precision_at_1 (= Recall@1) and mean_average_precision_at_r. With is_query/is_gallery the
  queries search the gallery rows, otherwise every test image queries all others (self excluded).

    python tools/plain_pml_script.py --csv /data/glyphs/dataset.csv --loss proxy_anchor --epochs 8
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import time
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from PIL import Image
from pytorch_metric_learning import losses
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LOSSES = {"proxy_nca": losses.ProxyNCALoss, "proxy_anchor": losses.ProxyAnchorLoss}


class CsvImages(Dataset):
    """Rows of one split of a dataset CSV; labels are renumbered 0..C-1 within the split."""

    def __init__(self, csv_path: Path, split: str, transform: T.Compose) -> None:
        with csv_path.open(newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row["split"] == split]
        if not rows:
            raise SystemExit(f"error: {csv_path} has no {split} rows")
        classes = {name: i for i, name in enumerate(sorted({row["label"] for row in rows}))}
        self.paths = [csv_path.parent / row["path"] for row in rows]
        self.labels = torch.tensor([classes[row["label"]] for row in rows])
        flags = "is_query" in rows[0] and "is_gallery" in rows[0]
        self.is_query = torch.tensor([row["is_query"] in ("1", "true") for row in rows]) if flags else None
        self.is_gallery = torch.tensor([row["is_gallery"] in ("1", "true") for row in rows]) if flags else None
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        with Image.open(self.paths[i]) as image:
            return self.transform(image.convert("RGB")), self.labels[i]


class Embedder(nn.Module):
    def __init__(self, backbone: str, dim: int) -> None:
        super().__init__()
        self.backbone = timm.create_model(backbone, pretrained=False, num_classes=0)
        self.head = nn.Linear(self.backbone.num_features, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.head(self.backbone(x)), dim=1)


@torch.no_grad()
def embed(model: Embedder, dataset: CsvImages, batch_size: int, workers: int) -> torch.Tensor:
    model.eval()
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    return torch.cat([model(images) for images, _ in loader])


def evaluate(model: Embedder, dataset: CsvImages, batch_size: int, workers: int) -> dict[str, float]:
    embeddings, labels = embed(model, dataset, batch_size, workers), dataset.labels
    calculator = AccuracyCalculator(include=("precision_at_1", "mean_average_precision_at_r"))
    if dataset.is_query is None:  # all-vs-all: the reference set includes each query itself
        result = calculator.get_accuracy(embeddings, labels, embeddings, labels, ref_includes_query=True)
    else:
        q, g = dataset.is_query, dataset.is_gallery
        result = calculator.get_accuracy(embeddings[q], labels[q], embeddings[g], labels[g], ref_includes_query=False)
    return {"recall@1": result["precision_at_1"], "map@r": result["mean_average_precision_at_r"]}


def main() -> None:
    parser = argparse.ArgumentParser(description="timm + pytorch-metric-learning proxy-loss baseline")
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--proxy-lr-mult", type=float, default=1.0, help="proxies' lr = lr x this")
    parser.add_argument("--loss", choices=sorted(LOSSES), default="proxy_anchor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--json", type=Path, help="write the metrics and settings here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    size = (args.image_size, args.image_size)
    normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    train_tf = T.Compose(
        [T.Resize(size), T.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1))] + normalize
    )
    eval_tf = T.Compose([T.Resize(size)] + normalize)
    train_set, test_set = CsvImages(args.csv, "train", train_tf), CsvImages(args.csv, "test", eval_tf)
    num_classes = len(set(train_set.labels.tolist()))

    model = Embedder(args.backbone, 128)
    loss_fn = LOSSES[args.loss](num_classes=num_classes, embedding_size=128)
    optimizer = torch.optim.Adam(
        [
            {"params": model.parameters()},
            {"params": loss_fn.parameters(), "lr": args.lr * args.proxy_lr_mult},
        ],
        lr=args.lr,
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True, num_workers=args.workers)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        total = 0.0
        for images, labels in loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(
            f"epoch {epoch}/{args.epochs}  loss {total / len(loader):.4f}  {time.perf_counter() - start:.0f}s",
            flush=True,
        )
    metrics = evaluate(model, test_set, 256, args.workers)
    seconds = time.perf_counter() - start
    print(f"train {len(train_set)} images / {num_classes} classes, test {len(test_set)} images, {seconds:.0f}s")
    print(f"Recall@1: {metrics['recall@1']:.4f}")
    print(f"MAP@R: {metrics['map@r']:.4f}")
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        args.json.write_text(
            json.dumps({**metrics, "seconds": seconds, "torch": torch.__version__, **settings}, indent=2)
        )


if __name__ == "__main__":
    main()
