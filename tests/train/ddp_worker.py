"""Started by `test_distributed.py` under torchrun: the first step of some losses, a cross-batch memory's steps, then
a short `retrieval train`.

Usage: torchrun --nproc_per_node 2 ddp_worker.py OUT_DIR CASES_JSON COMMANDS_JSON

Each rank saves `OUT_DIR/rank<R>.pt`: per case (name -> config overrides) the first batch it
trained on, its loss and the gradients after the backward pass (averaged over ranks by DDP), and under
`MEMORY_CASE` its memory's losses and state after `memory_batches()`. Then every rank runs each command
of COMMANDS_JSON (a list of `retrieval` argument lists) in the same process group; rank 0 prints
`COMMAND_END` after each, so that what each command printed can be told apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from retrieval.cli.main import main
from retrieval.config import load_config
from retrieval.losses import CircleLoss, CrossBatchMemory
from retrieval.runtime.distributed import process_group
from retrieval.train.step import GatheredLoss
from retrieval.train.trainer import Trainer

MEMORY_CASE = "cross_batch_memory"
COMMAND_END = "--- end of command ---"
MEMORY_DIM, MEMORY_SIZE, MEMORY_STEPS = 8, 24, 3  # a global batch of 8 x 3 steps wraps the memory of 24 once


def first_step(trainer: Trainer, batch: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, Any]:
    """Loss and gradients of the run's first step, on `batch` or on the first batch of the trainer's loader."""
    trainer.begin_epoch(0)
    images, labels = batch if batch is not None else next(iter(trainer.parts.loader))
    loss = trainer.parts.step.forward_backward(images.to(trainer.parts.device), labels.to(trainer.parts.device))
    named = [
        *trainer.parts.model.named_parameters(),
        *(("loss." + n, p) for n, p in trainer.parts.loss.named_parameters()),
    ]
    grads = {name: param.grad.detach().clone() for name, param in named if param.grad is not None}
    return {"images": images, "labels": labels, "loss": loss.cpu(), "grads": grads}


def memory_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The global batches of the memory case: 8 embeddings of 4 classes x 2 images a step, new classes each step."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(4).repeat_interleave(2)  # each rank's share of 4 holds 2 classes x 2 images
    return [(torch.randn(8, MEMORY_DIM, generator=generator), labels + 4 * step) for step in range(MEMORY_STEPS)]


def memory() -> CrossBatchMemory:
    return CrossBatchMemory(CircleLoss(gamma=80.0), MEMORY_DIM, MEMORY_SIZE)


def memory_steps(rank: int) -> dict[str, Any]:
    """A rank's losses and memory state after `memory_batches()`, each rank given its half of every batch."""
    queue = memory()
    loss = GatheredLoss(queue)
    values = []
    for embeddings, labels in memory_batches():
        share = slice(rank * 4, rank * 4 + 4)
        values.append(loss(embeddings[share].clone().requires_grad_(True), labels[share]).detach())
    return {"losses": torch.stack(values), "state": queue.state_dict()}


if __name__ == "__main__":
    out, cases, commands = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
    with process_group("cpu") as context:
        steps = {
            name: first_step(Trainer.from_config(load_config(None, overrides), out / name))
            for name, overrides in cases.items()
        }
        steps[MEMORY_CASE] = memory_steps(context.rank)
        torch.save(steps, out / f"rank{context.rank}.pt")
        codes = []
        for arguments in commands:
            codes.append(main(arguments))
            if context.is_main:
                print(COMMAND_END, flush=True)
    sys.exit(max(codes))
