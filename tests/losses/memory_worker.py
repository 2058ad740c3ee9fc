"""The ranks of tests/losses/test_memory_distributed.py, in a helper module (not a test module, which pytest
imports in its own way) so that spawned processes can unpickle them by name."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist

from retrieval.losses import CircleLoss, CrossBatchMemory
from retrieval.train.step import GatheredLoss

WORLD, DIM, MEMORY, STEPS = 2, 8, 24, 3  # a global batch of 8 x 3 steps wraps the memory of 24 once


def global_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(4).repeat_interleave(2)  # each rank's share of 4 holds 2 classes x 2 images
    return [(torch.randn(8, DIM, generator=generator), labels + 4 * step) for step in range(STEPS)]


def rank_worker(rank: int, port: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        memory = CrossBatchMemory(CircleLoss(gamma=80.0), DIM, MEMORY)
        loss = GatheredLoss(memory)
        values = []
        for embeddings, labels in global_batches():
            share = slice(rank * 4, rank * 4 + 4)
            values.append(loss(embeddings[share].clone().requires_grad_(True), labels[share]).detach())
        torch.save({"losses": torch.stack(values), "state": memory.state_dict()}, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
