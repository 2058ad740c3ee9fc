"""Two CPU processes (gloo): each rank's cross-batch memory holds every rank's embeddings, as one process's would."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from retrieval.losses import CircleLoss, CrossBatchMemory
from retrieval.train.step import GatheredLoss

WORLD, DIM, MEMORY, STEPS = 2, 8, 24, 3  # a global batch of 8 x 3 steps wraps the memory of 24 once


def _global_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(4).repeat_interleave(2)  # each rank's share of 4 holds 2 classes x 2 images
    return [(torch.randn(8, DIM, generator=generator), labels + 4 * step) for step in range(STEPS)]


def _rank(rank: int, port: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        memory = CrossBatchMemory(CircleLoss(gamma=80.0), DIM, MEMORY)
        loss = GatheredLoss(memory)
        values = []
        for embeddings, labels in _global_batches():
            share = slice(rank * 4, rank * 4 + 4)
            values.append(loss(embeddings[share].clone().requires_grad_(True), labels[share]).detach())
        torch.save({"losses": torch.stack(values), "state": memory.state_dict()}, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_every_rank_enqueues_the_global_batch(tmp_path: Path) -> None:
    mp.start_processes(_rank, args=(_free_port(), tmp_path), nprocs=WORLD, start_method="spawn")
    single = CrossBatchMemory(CircleLoss(gamma=80.0), DIM, MEMORY)
    expected = torch.stack([single(embeddings, labels).detach() for embeddings, labels in _global_batches()])
    for rank in range(WORLD):
        saved = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        torch.testing.assert_close(saved["losses"], expected, rtol=1e-6, atol=1e-6)
        for name, tensor in single.state_dict().items():
            torch.testing.assert_close(saved["state"][name], tensor, rtol=0, atol=0, msg=name)
