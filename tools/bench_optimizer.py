"""AdamW's update on the CPU: the per-tensor loop (PyTorch's CPU default) against `foreach` and `fused`.

Times `--steps` optimizer steps of a `--backbone` embedder's parameters (random gradients, one thread),
each implementation in this process after the per-tensor baseline, and says whether its weights are
bitwise those of the baseline: the toolkit's `retrieval.train.step.adamw` takes `foreach` because it
keeps the bits (a run reproduces) at a lower cost; `fused` is faster but rounds differently.

Usage: python tools/bench_optimizer.py [--backbone resnet18] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from retrieval.models import Embedder


def _steps(backbone: str, steps: int, **implementation: bool) -> tuple[float, torch.Tensor]:
    """Seconds per step of AdamW with `implementation`, and the weights after `steps` steps."""
    torch.manual_seed(0)
    model = Embedder(backbone, embedding_dim=128, pretrained=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, **implementation)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()  # the state is allocated on the first step: not timed
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    seconds = (time.perf_counter() - started) / steps
    return seconds, torch.cat([parameter.detach().flatten() for parameter in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.2f}, {args.backbone}, {args.steps} steps, 1 thread")
    base, weights = _steps(args.backbone, args.steps, foreach=False)
    print(f"per-tensor: {base * 1e3:.1f} ms a step")
    for name in ("foreach", "fused"):
        seconds, other = _steps(args.backbone, args.steps, **{name: True})
        same = "the same bits" if torch.equal(other, weights) else f"max difference {(other - weights).abs().max():.2e}"
        print(f"{name}: {seconds * 1e3:.1f} ms a step, {base / seconds:.2f}x the per-tensor loop's speed, {same}")


if __name__ == "__main__":
    main()
