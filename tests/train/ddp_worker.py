"""Started by `test_distributed.py` under torchrun: the first step of some losses, then a short `retrieval train`.

Usage: torchrun --nproc_per_node N ddp_worker.py OUT_DIR CASES_JSON TRAIN_ARG...

Each rank saves `OUT_DIR/rank<R>.pt`: per case (name -> config overrides) the first batch it
trained on, its loss and the gradients after the backward pass (averaged over ranks by DDP).
Then every rank runs `retrieval train TRAIN_ARG...` in the same process group.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from retrieval.cli.main import main
from retrieval.config import load_config
from retrieval.runtime.distributed import process_group
from retrieval.train.trainer import Trainer


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


if __name__ == "__main__":
    out, cases, train_args = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
    with process_group("cpu") as context:
        steps = {
            name: first_step(Trainer.from_config(load_config(None, overrides), out / name))
            for name, overrides in cases.items()
        }
        torch.save(steps, out / f"rank{context.rank}.pt")
        code = main(train_args)
    sys.exit(code)
