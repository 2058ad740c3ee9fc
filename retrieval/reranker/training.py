"""Training the pair model on mined pairs: binary cross-entropy, with the toolkit's optimizer step and schedule.

A step is `retrieval.train.step.OptimizerStep` (autocast, fp16 loss scaling, clipping, as `retrieval train`
and `retrieval pretrain` step): its model is the pair model's describer over the batch's query images then
its result images, its criterion `PairLoss`, the head and the loss, whose "labels" carry each pair's target
and cosine. The learning rate follows `LrSchedule` (cosine, a tenth of an epoch of warm-up). The positives
weigh as much as the negatives in all (`pos_weight`), as the mined pairs are mostly negatives.

`reranker.backbone`: `trained` fine-tunes the backbone too, on the pairs' images with the training split's
augmentation (`PairImages`): each pair costs two images through the backbone, forward and backward.
`frozen` trains the projection and the head alone, on each training image's pooled backbone features
computed once without augmentation (`PairFeatures`): an epoch then costs an MLP over the pairs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from retrieval.config import Config
from retrieval.data.image_loader import BadImage
from retrieval.errors import UserError
from retrieval.models.pair_model import PairHead, PairModel
from retrieval.reranker.mining import Pairs
from retrieval.runtime.device import amp_dtype
from retrieval.runtime.distributed import DistributedContext
from retrieval.train.epoch_loop import epoch_batches, seed_epoch
from retrieval.train.schedule import LrSchedule
from retrieval.train.step import LossTracker, OptimizerStep, adamw

__all__ = ["PairDataset", "PairFeatures", "PairImages", "PairLoss", "train_pair_model"]

_log = logging.getLogger(__name__)
_WARMUP_EPOCHS = 0.1


class PairDataset(Dataset):
    """The mined pairs as items `(query input, result input, target, cosine)`; the inputs are a subclass's."""

    def __init__(self, pairs: Pairs) -> None:
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs.targets)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, float, float]:
        query, result = (self.input(int(rows[index])) for rows in (self.pairs.queries, self.pairs.results))
        return query, result, float(self.pairs.targets[index]), float(self.pairs.cosines[index])

    def input(self, row: int) -> Tensor:
        """What the trained module takes of training image `row`."""
        raise NotImplementedError


class PairImages(PairDataset):
    """Each pair's two images, from a dataset of `(image, label)` items (`reranker.backbone: trained`)."""

    def __init__(self, images: Dataset, pairs: Pairs) -> None:
        super().__init__(pairs)
        self.images = images

    def input(self, row: int) -> Tensor:
        item = self.images[row]
        if isinstance(item, BadImage):
            raise UserError(item.message)
        image: Tensor = item[0]
        return image


class PairFeatures(PairDataset):
    """Each pair's two rows of `(N, F)` pooled backbone features (`reranker.backbone: frozen`)."""

    def __init__(self, features: np.ndarray, pairs: Pairs) -> None:
        super().__init__(pairs)
        self.features = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))

    def input(self, row: int) -> Tensor:
        return self.features[row]


class PairLoss(nn.Module):
    """Descriptors of a batch's query images then result images `(2B, P)`, and `(B, 2)` targets and cosines -> BCE."""

    def __init__(self, head: PairHead, pos_weight: float) -> None:
        super().__init__()
        self.head = head
        self.pos_weight: Tensor
        self.register_buffer("pos_weight", torch.tensor([pos_weight]))

    def forward(self, descriptors: Tensor, labels: Tensor) -> Tensor:
        half = len(labels)
        descriptors = descriptors.float()
        logits = self.head(descriptors[:half], descriptors[half:], labels[:, 1])
        return F.binary_cross_entropy_with_logits(logits, labels[:, 0], pos_weight=self.pos_weight)


def train_pair_model(model: PairModel, data: PairDataset, config: Config, device: torch.device) -> float:
    """Train `model` (on `device`) on the pairs of `data` for `config.reranker.epochs`; the last epoch's mean loss.

    `PairFeatures` train the projection and the head (the backbone stays as it is); `PairImages` the whole model.

    Raises:
        UserError: the loss stops being finite (lower reranker.lr), or an image cannot be read.
    """
    settings, pairs = config.reranker, data.pairs
    frozen = isinstance(data, PairFeatures)
    trained: nn.Module = model.describe.projection if frozen else model.describe
    model.describe.embedder.requires_grad_(not frozen)
    generator = torch.Generator().manual_seed(config.train.seed)
    loader: DataLoader[Any] = DataLoader(
        data,
        batch_size=settings.batch_size,
        shuffle=True,
        generator=generator,
        num_workers=0 if frozen else config.data.num_workers,
        pin_memory=config.data.pin_memory and device.type == "cuda",
    )
    positives = max(pairs.positives, 1)
    criterion = PairLoss(model.head, (len(pairs.targets) - positives) / positives).to(device)
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = adamw(parameters, lr=settings.lr, weight_decay=settings.weight_decay)
    step = OptimizerStep(
        trained,
        criterion,
        optimizer,
        DistributedContext(),
        amp_dtype(config.train.amp, device),
        config.train.grad_clip,
    )
    schedule = LrSchedule("cosine", len(loader), settings.epochs, _WARMUP_EPOCHS)
    loss = float("nan")
    for epoch in range(settings.epochs):
        seed_epoch(loader, config.train.seed, epoch)
        model.train()
        if frozen:
            model.describe.embedder.eval()  # not run: its BatchNorm statistics stay the checkpoint's
        tracker = LossTracker(device, skip_non_finite=step.scaler is not None)
        started = time.perf_counter()
        batches = epoch_batches(loader, tracker, epoch, settings.epochs, "lower reranker.lr")
        for index, (queries, results, targets, cosines) in batches:
            for group in optimizer.param_groups:
                group["lr"] = settings.lr * schedule.factor(epoch * len(loader) + index)
            batch = torch.cat([queries, results]).to(device, non_blocking=True)
            labels = torch.stack([targets.float(), cosines.float()], dim=1).to(device, non_blocking=True)
            tracker.add(step(batch, labels))
        loss = tracker.mean()
        seconds = time.perf_counter() - started
        print(f"re-ranker epoch {epoch + 1}/{settings.epochs}  loss {loss:.4f}  ({seconds:.1f}s)", flush=True)
    return loss
