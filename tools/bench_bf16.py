"""bf16 on the CPU: the toolkit's training step and embedding pass in bfloat16 against float32, one process.

Two Trainers are built from the same config (`tools/bench_train.py`'s `toolkit_step`: resnet18,
ProxyNCA, AdamW), one with `train.amp=none` and one with `train.amp=bf16`; each times
`Trainer.recorded_step` on the same in-memory batches. Embedding times the model's forward pass
in eval mode under `torch.no_grad`, with and without bf16 autocast, as `retrieval embed` runs it.
Rounds alternate the order of the two precisions, so machine noise hits both alike. Prints
images/second (median over rounds) and the ratio bf16 / float32. bf16 pays on CPUs with
AVX512-BF16 or AMX; `tools/bench.py` records which flags this CPU has.

    python tools/bench_bf16.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from bench_train import toolkit_step
from torch import Tensor

PRECISIONS = ("none", "bf16")


def _rounds(sides: dict[str, Callable[[], None]], rounds: int, images: int) -> dict[str, float]:
    """Median images/second of each side, alternating which runs first."""
    results: dict[str, list[float]] = {name: [] for name in sides}
    for name in sides:  # warm-up
        sides[name]()
    for round_index in range(rounds):
        order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for name in order:
            start = time.perf_counter()
            sides[name]()
            results[name].append(images / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64, help="training batch")
    parser.add_argument("--eval-batch-size", type=int, default=256, help="embedding batch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=3, help="training steps per side and round")
    args = parser.parse_args()

    torch.manual_seed(0)
    steps: dict[str, Callable[[Tensor, Tensor], None]] = {}
    models = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for amp in PRECISIONS:
            side = argparse.Namespace(**{**vars(args), "amp": amp, "device": "cpu"})
            steps[amp], num_classes, trainer = toolkit_step(side, Path(run_dir) / amp)
            models[amp] = trainer.parts.model
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    labels = torch.randint(num_classes, (args.batch_size,))

    def train(amp: str) -> Callable[[], None]:
        def run() -> None:
            for _ in range(args.steps):
                steps[amp](images, labels)

        return run

    eval_images = torch.randn(args.eval_batch_size, 3, args.image_size, args.image_size)

    def embed(amp: str) -> Callable[[], None]:
        model = models[amp]

        def run() -> None:
            model.eval()
            context = torch.autocast("cpu", dtype=torch.bfloat16) if amp == "bf16" else nullcontext()
            with torch.no_grad(), context:
                model(eval_images)

        return run

    train_rate = _rounds({amp: train(amp) for amp in PRECISIONS}, args.rounds, args.steps * args.batch_size)
    embed_rate = _rounds({amp: embed(amp) for amp in PRECISIONS}, args.rounds, args.eval_batch_size)
    print(f"{args.backbone}, {args.image_size} px, {args.threads} threads, median of {args.rounds} rounds\n")
    print("| work | float32 images/s | bf16 images/s | bf16 / float32 |")
    print("|---|---|---|---|")
    for work, rate in (("training step", train_rate), ("embedding", embed_rate)):
        print(f"| {work} | {rate['none']:.1f} | {rate['bf16']:.1f} | {rate['bf16'] / rate['none']:.2f}x |")


if __name__ == "__main__":
    main()
