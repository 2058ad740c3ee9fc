"""The plain baseline: a timm backbone + a pytorch-metric-learning proxy loss, glued by hand.

What a user who does not use this toolkit writes (it imports nothing from `retrieval`), so
`tools/dev_benchmark.py` can show whether the toolkit beats it at the same model, image size,
batch, epochs and thread count:

- model: `timm.create_model(backbone, pretrained=False, num_classes=0)` -> Linear(-> 128) -> L2 norm;
- loss: a PML loss with its default hyper-parameters: `ProxyNCALoss`, `ProxyAnchorLoss`,
  `SoftTripleLoss` (only num_classes and embedding_size given), `CircleLoss` (m 0.4, gamma 80),
  `TripletMarginLoss` (margin 0.2, with a semi-hard `TripletMarginMiner`), `MultiSimilarityLoss`
  with a `MultiSimilarityMiner`, `SupConLoss`, or `ContrastiveLoss` with a `PairMarginMiner`; the
  pair losses get batches of 4 images per class (PML's `MPerClassSampler`), the proxy losses
  shuffled batches;
- optimizer: one Adam over the model's and the loss's parameters (the proxies), one constant
  lr for all except the proxies (`--proxy-lr-mult`, default 10: lr 1e-3, proxies 1e-2); no
  schedule, no weight decay, no warm-up, no model selection;
- data: images from a dataset CSV (`path,label,split[,is_query,is_gallery]`) converted to RGB;
  train = Resize + light RandomAffine (5 degrees, 4% shift, 0.9-1.1 scale, no flip) whose
  borders are filled with the image's own background (the median of its border pixels) +
  ImageNet normalization; eval = Resize + normalization; last partial batch dropped;
- evaluation after the last epoch on the test rows (and the val rows, if any) with PML's
  `AccuracyCalculator`: precision_at_1 (= Recall@1) and mean_average_precision_at_r. With
  is_query/is_gallery the queries search the gallery rows, otherwise every image queries all
  others (self excluded). `--embeddings-out DIR` saves each split's embeddings (`test.npy`,
  `val.npy`, rows in CSV order) so `tools/dev_benchmark.py` can score them with the toolkit's
  per-query code and pair them with a toolkit run (`retrieval compare`).

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
from pytorch_metric_learning import losses, miners, samplers
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
PROXY_LOSSES = {
    "proxy_nca": losses.ProxyNCALoss,
    "proxy_anchor": losses.ProxyAnchorLoss,
    "soft_triple": losses.SoftTripleLoss,
    "arcface": losses.ArcFaceLoss,
    "cosface": losses.CosFaceLoss,
}
# name -> (loss, miner or None), each at PML's defaults (triplet at the usual margin 0.2).
PAIR_LOSSES = {
    "circle": lambda: (losses.CircleLoss(), None),
    "triplet": lambda: (
        losses.TripletMarginLoss(margin=0.2),
        miners.TripletMarginMiner(margin=0.2, type_of_triplets="semihard"),
    ),
    "multi_similarity": lambda: (losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner()),
    "supcon": lambda: (losses.SupConLoss(), None),
    "contrastive": lambda: (losses.ContrastiveLoss(), miners.PairMarginMiner()),
}
IMAGES_PER_CLASS = 4  # in each batch of a pair loss


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


class AffineBackgroundFill:
    """RandomAffine whose uncovered borders take the image's background: its border pixels' median."""

    def __init__(self, degrees: float, translate: float, scale: tuple[float, float]) -> None:
        self.affine = T.RandomAffine(degrees=degrees, translate=(translate, translate), scale=scale)

    def __call__(self, image: Image.Image) -> Image.Image:
        pixels = np.asarray(image).reshape(image.height, image.width, -1)
        border = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
        self.affine.fill = [int(value) for value in np.median(border, axis=0)]
        return self.affine(image)


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


def has_split(csv_path: Path, split: str) -> bool:
    with csv_path.open(newline="") as handle:
        return any(row["split"] == split for row in csv.DictReader(handle))


def evaluate(embeddings: torch.Tensor, dataset: CsvImages) -> dict[str, float]:
    labels = dataset.labels
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
    parser.add_argument("--proxy-lr-mult", type=float, default=10.0, help="proxies' lr = lr x this")
    parser.add_argument("--loss", choices=sorted({**PROXY_LOSSES, **PAIR_LOSSES}), default="proxy_anchor")
    parser.add_argument("--affine-degrees", type=float, default=5.0)
    parser.add_argument("--affine-translate", type=float, default=0.04, help="largest shift, a fraction of the side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--json", type=Path, help="write the metrics and settings here")
    parser.add_argument("--embeddings-out", type=Path, help="save val.npy and test.npy (rows in CSV order) here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    size = (args.image_size, args.image_size)
    normalize = [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    affine = AffineBackgroundFill(args.affine_degrees, args.affine_translate, (0.9, 1.1))
    train_tf = T.Compose([T.Resize(size), affine, *normalize])
    eval_tf = T.Compose([T.Resize(size)] + normalize)
    train_set = CsvImages(args.csv, "train", train_tf)
    eval_sets = {split: CsvImages(args.csv, split, eval_tf) for split in ("val", "test") if has_split(args.csv, split)}
    num_classes = len(set(train_set.labels.tolist()))

    model = Embedder(args.backbone, 128)
    pair_loss = args.loss in PAIR_LOSSES
    if pair_loss:
        loss_fn, miner = PAIR_LOSSES[args.loss]()
    else:
        loss_fn, miner = PROXY_LOSSES[args.loss](num_classes=num_classes, embedding_size=128), None
    optimizer = torch.optim.Adam(
        [
            {"params": model.parameters()},
            {"params": loss_fn.parameters(), "lr": args.lr * args.proxy_lr_mult},
        ],
        lr=args.lr,
    )
    sampler = (
        samplers.MPerClassSampler(train_set.labels, IMAGES_PER_CLASS, args.batch_size, len(train_set))
        if pair_loss
        else None
    )
    loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        num_workers=args.workers,
    )
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        total = 0.0
        for images, labels in loader:
            embeddings = model(images)
            loss = loss_fn(embeddings, labels, miner(embeddings, labels)) if miner else loss_fn(embeddings, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(
            f"epoch {epoch}/{args.epochs}  loss {total / len(loader):.4f}  {time.perf_counter() - start:.0f}s",
            flush=True,
        )
    metrics = {}
    for split, dataset in eval_sets.items():
        embeddings = embed(model, dataset, 256, args.workers)
        scores = evaluate(embeddings, dataset)
        metrics.update(scores if split == "test" else {f"val/{key}": value for key, value in scores.items()})
        if args.embeddings_out:
            args.embeddings_out.mkdir(parents=True, exist_ok=True)
            np.save(args.embeddings_out / f"{split}.npy", embeddings.numpy())
    seconds = time.perf_counter() - start
    print(
        f"train {len(train_set)} images / {num_classes} classes, test {len(eval_sets['test'])} images, {seconds:.0f}s"
    )
    if "val/recall@1" in metrics:
        print(f"val Recall@1 {metrics['val/recall@1']:.4f}  val MAP@R {metrics['val/map@r']:.4f}")
    print(f"Recall@1: {metrics['recall@1']:.4f}")
    print(f"MAP@R: {metrics['map@r']:.4f}")
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        args.json.write_text(
            json.dumps({**metrics, "seconds": seconds, "torch": torch.__version__, **settings}, indent=2)
        )


if __name__ == "__main__":
    main()
