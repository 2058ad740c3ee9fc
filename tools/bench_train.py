"""Training throughput: the toolkit's step against a bare timm + pytorch-metric-learning loop, one process.

Both sides train the same model on the same in-memory batches, with the same optimizer and loss:
- toolkit: `Trainer.recorded_step` (what every step of `retrieval train` runs: lr schedule,
  device copy, NHWC on GPU, autocast, `Embedder` = timm backbone -> avg+max pooling -> Linear ->
  L2 norm, our `ProxyNCALoss(scale=16)`, backward, AdamW with a 100x proxy group, the loss kept
  on the device) of a Trainer built from the digits demo config with the model and batch below;
- bare loop: `timm.create_model(backbone, num_classes=0)` -> Linear(-> 128), PML
  `ProxyNCALoss(distance=CosineSimilarity(), softmax_scale=16)` (the same loss; it normalizes
  itself), AdamW (weight decay 1e-4, proxies 100x), `zero_grad / forward / backward / step`,
  the loss summed on the device (no per-step `.item()`, the strongest plain loop); on GPU the
  same autocast dtype and channels_last.

After warm-up steps, rounds alternate (toolkit first on even rounds, bare loop first on odd
ones), each timing `--steps` steps with the device synchronized at both ends, so machine noise
hits both alike. Prints images/second (median and best over rounds) and the ratio toolkit / bare
(target >= 0.95 on CPU at resnet18, 64 px, batch 64).

    nice -n 5 python tools/bench_train.py --threads 2
    python tools/bench_train.py --device cuda --amp bf16 --backbone resnet50 --image-size 224 --batch-size 128
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import timm
import torch
from pytorch_metric_learning import distances as pml_distances
from pytorch_metric_learning import losses as pml_losses
from torch import Tensor, nn

from retrieval.config import load_config
from retrieval.runtime.environment import configure_process
from retrieval.train.diagnostics import EpochDiagnostics
from retrieval.train.step import LossTracker
from retrieval.train.trainer import Trainer

EMBEDDING_DIM = 128
SCALE = 16.0  # softmax scale of ProxyNCA on both sides
LR, PROXY_LR_MULT, WEIGHT_DECAY = 1e-3, 100.0, 1e-4


def toolkit_step(args: argparse.Namespace, run_dir: Path) -> tuple[Callable[[Tensor, Tensor], None], int, Trainer]:
    """The Trainer's per-step work on a batch, and the number of classes its loss has proxies for."""
    overrides = [
        f"model.backbone={args.backbone}",
        f"model.embedding_dim={EMBEDDING_DIM}",
        f"data.image_size={args.image_size}",
        f"data.batch_size={args.batch_size}",
        "loss.name=proxy_nca",
        f"loss.scale={SCALE}",
        f"train.lr={LR}",
        f"train.proxy_lr_mult={PROXY_LR_MULT}",
        f"train.weight_decay={WEIGHT_DECAY}",
        "train.freeze_bn=false",
        "train.freeze_backbone_epochs=0",
        "train.warmup_epochs=0",
        f"train.device={args.device}",
        f"train.amp={args.amp}",
        f"train.threads={args.threads}",
    ]
    config = load_config(None, overrides)
    train = config.train  # the thread count of both sides, as `retrieval train` sets it
    configure_process(threads=train.threads, deterministic=train.deterministic, seed=train.seed)
    trainer = Trainer.from_config(config, run_dir)
    trainer.begin_epoch(0)
    parts = trainer.parts
    tracker = LossTracker(parts.device)
    groups = torch.from_numpy(parts.class_groups).to(parts.device)
    diagnostics = EpochDiagnostics(groups)
    steps_per_epoch = len(parts.loader)
    counter = itertools.count()

    def step(images: Tensor, labels: Tensor) -> None:
        nonlocal diagnostics
        index = next(counter) % steps_per_epoch
        trainer.recorded_step(images, labels, index, tracker, diagnostics)
        if index == steps_per_epoch - 1:  # the loop keeps an epoch's statistics, then starts afresh
            diagnostics = EpochDiagnostics(groups)

    return step, parts.data.num_classes, trainer


def bare_step(args: argparse.Namespace, num_classes: int, device: torch.device) -> Callable[[Tensor, Tensor], None]:
    """A plain timm + PML training step, written the way a user would."""
    backbone = timm.create_model(args.backbone, pretrained=False, num_classes=0)
    model = nn.Sequential(backbone, nn.Linear(backbone.num_features, EMBEDDING_DIM)).to(device)
    channels_last = device.type == "cuda"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    loss_fn = pml_losses.ProxyNCALoss(
        num_classes, EMBEDDING_DIM, distance=pml_distances.CosineSimilarity(), softmax_scale=SCALE
    ).to(device)
    optimizer = torch.optim.AdamW(
        [
            {"params": model.parameters()},
            {"params": loss_fn.parameters(), "lr": LR * PROXY_LR_MULT, "weight_decay": 0.0},
        ],
        lr=LR,
        weight_decay=WEIGHT_DECAY,
    )
    dtype = torch.bfloat16 if args.amp == "bf16" else None
    total = torch.zeros((), device=device)
    model.train()

    def step(images: Tensor, labels: Tensor) -> None:
        nonlocal total
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype) if dtype else nullcontext():
            embeddings = model(images)
        loss = loss_fn(embeddings.float(), labels)
        loss.backward()
        optimizer.step()
        total += loss.detach()

    return step


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """Images/second of each side in every round."""
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as run_dir:
        ours, num_classes, trainer = toolkit_step(args, Path(run_dir))
    device = trainer.parts.device
    bare = bare_step(args, num_classes, device)
    pin = device.type == "cuda"
    batches = [
        (
            torch.randn(args.batch_size, 3, args.image_size, args.image_size),
            torch.randint(num_classes, (args.batch_size,)),
        )
        for _ in range(4)
    ]
    if pin:
        batches = [(images.pin_memory(), labels.pin_memory()) for images, labels in batches]
    sides = {"toolkit": ours, "bare": bare}

    def timed(step: Callable[[Tensor, Tensor], None], steps: int) -> float:
        _synchronize(device)
        start = time.perf_counter()
        for index in range(steps):
            step(*batches[index % len(batches)])
        _synchronize(device)
        return steps * args.batch_size / (time.perf_counter() - start)

    for step in sides.values():
        timed(step, args.warmup)
    results: dict[str, list[float]] = {name: [] for name in sides}
    for round_index in range(args.rounds):
        order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for name in order:
            results[name].append(timed(sides[name], args.steps))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--amp", default="none", choices=("none", "bf16"))
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (both sides)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5, help="steps per side and round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per side first")
    args = parser.parse_args()
    results = measure(args)
    print(
        f"{args.backbone}, {args.image_size} px, batch {args.batch_size}, {args.device}, amp {args.amp}, "
        f"threads {torch.get_num_threads()}, {args.rounds} rounds x {args.steps} steps"
    )
    for name, values in results.items():
        print(f"{name:8s} images/s: median {statistics.median(values):8.1f}  best {max(values):8.1f}")
    ratio = statistics.median(results["toolkit"]) / statistics.median(results["bare"])
    best_ratio = max(results["toolkit"]) / max(results["bare"])
    print(f"ratio toolkit / bare: median {ratio:.3f}x  best {best_ratio:.3f}x  (target >= 0.95x)")


if __name__ == "__main__":
    main()
