"""Several processes, one run: torchrun's environment, gathers that keep the gradient, evaluation shards.

`torchrun --nproc_per_node N -m retrieval train ...` starts N processes with `RANK`, `WORLD_SIZE`,
`LOCAL_RANK` and the rendezvous in their environment; `init_distributed` joins them into one
process group (NCCL on GPUs, gloo on CPUs). Batch sizes stay global: `data.batch_size` and
`data.p` are what one optimizer step sees over all processes, each process takes its
1/world_size share, so a config trains the same on one GPU or eight.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from retrieval.errors import UserError

__all__ = [
    "DistributedContext",
    "all_gather_keep_local",
    "gather_rows",
    "init_distributed",
    "process_group",
    "shard_range",
]


@dataclasses.dataclass(frozen=True)
class DistributedContext:
    """This process's place in the run: rank 0 of 1 when not distributed."""

    rank: int = 0  # global rank
    world_size: int = 1  # number of processes
    local_rank: int = 0  # rank on this machine: the GPU it drives

    @property
    def enabled(self) -> bool:
        """More than one process takes part."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """The one process that writes files and prints."""
        return self.rank == 0

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` (any picklable object) on every rank."""
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def broadcast_state(self, module: nn.Module) -> None:
        """Give every rank rank 0's parameters and buffers of `module`, in place."""
        if self.enabled:
            for tensor in module.state_dict().values():
                dist.broadcast(tensor, src=0)

    def barrier(self) -> None:
        """Wait until every rank has reached this point (a no-op in one process)."""
        if self.enabled:
            dist.barrier()

    def sum(self, tensor: Tensor) -> Tensor:
        """The sum of `tensor` over all ranks (a new tensor; `tensor` itself is left alone)."""
        total = tensor.detach().clone()
        if self.enabled:
            dist.all_reduce(total)
        return total

    def process_device(self, device: torch.device) -> torch.device:
        """The device of this process: its own GPU (`cuda:LOCAL_RANK`) when several processes share a machine."""
        if self.enabled and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    @classmethod
    def current(cls) -> DistributedContext:
        """The process group's rank and size when one is initialized, else a single process."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        return cls(dist.get_rank(), dist.get_world_size(), local_rank)


def init_distributed(device: str) -> DistributedContext:
    """Join the process group torchrun describes in the environment; a single process without it.

    Args:
        device: `train.device`; `auto` and `cuda` become `cuda:LOCAL_RANK` with NCCL when GPUs are
            available, else the processes talk over gloo on the CPU.

    Raises:
        UserError: fewer GPUs than processes on this machine, or a `cuda:N` device under torchrun.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext.current()
    if dist.is_initialized():
        return DistributedContext.current()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device in ("auto", "cuda") and torch.cuda.is_available()
    if device.startswith("cuda:"):
        raise UserError(
            f"train.device={device} names one GPU, but torchrun gives each process its own; use cuda or auto"
        )
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise UserError(
                f"process {local_rank} on this machine has no GPU ({torch.cuda.device_count()} visible); "
                "set torchrun --nproc_per_node to at most the number of GPUs"
            )
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistributedContext.current()


@contextmanager
def process_group(device: str) -> Iterator[DistributedContext]:
    """`init_distributed(device)` for the duration of a command; the group it started is destroyed after."""
    started = not (dist.is_available() and dist.is_initialized())
    context = init_distributed(device)
    try:
        yield context
    finally:
        if started and context.enabled:
            dist.destroy_process_group()


def shard_range(size: int, context: DistributedContext) -> range:
    """This rank's contiguous share of `size` items (the first `size % world_size` ranks take one more)."""
    per_rank, extra = divmod(size, context.world_size)
    start = context.rank * per_rank + min(context.rank, extra)
    return range(start, start + per_rank + (context.rank < extra))


def gather_rows(rows: np.ndarray, context: DistributedContext, device: torch.device) -> np.ndarray:
    """Concatenate every rank's `(n_r, D)` rows in rank order (the shards of `shard_range`), on every rank.

    Shards may differ in length by one; they are padded to the longest for `all_gather` and cut back.
    """
    if not context.enabled:
        return rows
    local = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    lengths = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(context.world_size)]
    dist.all_gather(lengths, torch.tensor([len(rows)], device=device))
    longest = int(max(length.item() for length in lengths))
    padded = torch.zeros((longest, *rows.shape[1:]), dtype=local.dtype, device=device)
    padded[: len(rows)] = local
    chunks = [torch.empty_like(padded) for _ in range(context.world_size)]
    dist.all_gather(chunks, padded)
    return torch.cat([chunk[: int(n.item())] for chunk, n in zip(chunks, lengths, strict=True)]).cpu().numpy()


class _GatherKeepLocal(torch.autograd.Function):
    """Forward: every rank's `(B, ...)` tensor, concatenated in rank order. Backward: the local slice only.

    Each rank computes the same loss over the gathered batch and DDP averages the ranks'
    gradients, so the local slice's gradient is multiplied by world_size: the average is then
    the gradient a single process would get from the whole batch.
    """

    @staticmethod
    def forward(ctx: Any, tensor: Tensor) -> Tensor:
        world_size, rank = dist.get_world_size(), dist.get_rank()
        chunks = [torch.empty_like(tensor) for _ in range(world_size)]
        dist.all_gather(chunks, tensor.contiguous())
        ctx.rank, ctx.world_size, ctx.rows = rank, world_size, tensor.shape[0]
        return torch.cat(chunks)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        start = ctx.rank * ctx.rows
        return grad[start : start + ctx.rows] * ctx.world_size


def all_gather_keep_local(tensor: Tensor) -> Tensor:
    """`(world_size * B, ...)`: the same-shaped `(B, ...)` tensors of all ranks, the gradient kept on the local one.

    Without an initialized process group, `tensor` itself. Every rank must pass the same shape.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    if not tensor.requires_grad:
        chunks = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(chunks, tensor.contiguous())
        return torch.cat(chunks)
    return _GatherKeepLocal.apply(tensor)
