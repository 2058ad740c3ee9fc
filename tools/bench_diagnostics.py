"""What the per-step training diagnostics cost, against the loss's own forward + backward, in one process.

For the Anchor Loss at B = 128, D = 128 and K in {100, 1000, 11318} classes, times one forward +
backward of the loss alone (the baseline) and the same followed by `EpochDiagnostics.update`
with the loss's `last_stats` (what the trainer does after each step), interleaved round by
round so machine noise hits both, and prints the ratio of the best passes. The backbone's
forward and backward, which a real step adds to both, are left out: the ratio is an upper bound.

Usage: python tools/bench_diagnostics.py [--rounds 30] [--device cpu] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from retrieval.losses import AnchorLoss
from retrieval.metrics import frequency_groups
from retrieval.train.diagnostics import EpochDiagnostics

BATCH, DIM = 128, 128
CLASSES = (100, 1000, 11318)


def _best_seconds(passes: dict[str, Callable[[], None]], rounds: int, device: torch.device) -> dict[str, float]:
    best = dict.fromkeys(passes, float("inf"))
    for _ in range(2):  # warm-up
        for run in passes.values():
            run()
    for round_index in range(rounds):
        order = list(passes.items()) if round_index % 2 == 0 else list(reversed(passes.items()))
        for name, run in order:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            run()
            if device.type == "cuda":
                torch.cuda.synchronize()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"device {device}, torch threads {torch.get_num_threads()}, B={BATCH}, D={DIM}, best of {args.rounds}")
    print(f"{'classes':>8}  {'loss ms':>8}  {'+diag ms':>8}  ratio")
    for num_classes in CLASSES:
        best = _measure(num_classes, device, args.rounds)
        ratio = best["diag"] / best["loss"]
        print(f"{num_classes:>8}  {best['loss'] * 1e3:8.3f}  {best['diag'] * 1e3:8.3f}  {ratio:.2f}x")


def _measure(num_classes: int, device: torch.device, rounds: int) -> dict[str, float]:
    """Best seconds of the Anchor Loss's forward + backward, alone and followed by the diagnostics."""
    generator = torch.Generator().manual_seed(0)
    loss_fn = AnchorLoss(num_classes, DIM).to(device)
    embeddings = torch.randn(BATCH, DIM, generator=generator).to(device).requires_grad_()
    labels = torch.randint(0, num_classes, (BATCH,), generator=generator).to(device)
    diagnostics = EpochDiagnostics(torch.from_numpy(frequency_groups(labels.cpu().numpy(), num_classes)).to(device))

    def step() -> None:
        loss_fn(embeddings, labels).backward()

    def step_with_diagnostics() -> None:
        step()
        diagnostics.update(loss_fn.last_stats)

    return _best_seconds({"loss": step, "diag": step_with_diagnostics}, rounds, device)


if __name__ == "__main__":
    main()
