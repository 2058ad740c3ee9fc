"""One optimizer step: forward under autocast, loss, backward (DDP-synchronized), clipping, AdamW.

A step may span several micro-batches (`forward_backward` on each, then `apply`: gradient
accumulation, `retrieval.train.accumulation`). Under `train.amp: fp16` the loss is scaled by
torch's `GradScaler` so small float16 gradients do not underflow; a step whose gradients overflow
(inf or NaN) is skipped by the scaler, which lowers the scale and goes on.

Nothing here reads a value back to the host: the loss stays on the device (`LossTracker` sums it
and looks for a non-finite value without a sync per step), and so does the count of skipped
steps, so a GPU is never stalled by the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from retrieval.losses import MetricLoss
from retrieval.runtime.distributed import DistributedContext, all_gather_keep_local

__all__ = ["GatheredLoss", "LossTracker", "OptimizerStep"]


class GatheredLoss(nn.Module):
    """A pair loss over the embeddings of all ranks: the batch it sees is the global one.

    Pair losses (`MetricLoss.needs_pk_batches`) compare the images of one batch with each other;
    gathered, a rank's anchors meet the positives and negatives of every rank, as in a single
    process with the global batch. The wrapped loss's `last_stats` are then the global batch's.
    Alone (no process group) it is the wrapped loss.

    Args:
        loss: the pair loss, called with the gathered `(world_size * B, D)` embeddings and labels.
    """

    def __init__(self, loss: MetricLoss) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of the global batch; `embeddings (B, D)` and `labels (B,)` are this rank's share."""
        loss: Tensor = self.loss(all_gather_keep_local(embeddings), all_gather_keep_local(labels))
        return loss


class _ModelAndLoss(nn.Module):
    """images, labels -> loss: the model and the loss as one module, so DDP synchronizes the proxies too."""

    def __init__(self, model: nn.Module, criterion: nn.Module, amp_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.model = model
        self.criterion = criterion
        self.amp_dtype = amp_dtype

    def forward(self, images: Tensor, labels: Tensor) -> Tensor:
        autocast = torch.autocast(images.device.type, dtype=self.amp_dtype) if self.amp_dtype else nullcontext()
        with autocast:
            embeddings = self.model(images)
        return self.criterion(embeddings, labels)  # losses compute in float32 themselves


def adamw(params: Iterable[Any], lr: float = 1e-3, weight_decay: float = 1e-2) -> torch.optim.AdamW:
    """AdamW with its multi-tensor (`foreach`) update, which CUDA gets by default and the CPU does not.

    On the CPU it is faster than the per-tensor loop and gives the same bits (tools/bench_optimizer.py). The
    fused update is faster still but rounds differently, so the figures of earlier runs would not reproduce.
    """
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)


class OptimizerStep:
    """Runs optimizer steps on `(images, labels)` batches already on the device.

    Under several processes the model and the loss are wrapped together in one
    `DistributedDataParallel`, so the gradients of the backbone, the head and the proxies are
    averaged over ranks during the backward pass. DDP fixes its set of trainable parameters when it
    is built, so `refresh()` rebuilds the wrapper when that set changes (a backbone that thaws).

    Args:
        model: the embedder, on the device.
        criterion: `loss(embeddings, labels)`; for pair losses under several processes a
            `GatheredLoss`, so it sees the global batch.
        optimizer: over the model's and the loss's parameters.
        context: the process group this step belongs to.
        amp_dtype: autocast dtype of the forward pass (None: float32); float16 adds loss scaling.
        grad_clip: max global gradient norm (None or 0: no clipping).
        compile: wrap the forward + loss in `torch.compile`.
        accumulate_steps: micro-batches per optimizer step (the trainer plans them; see
            `retrieval.train.accumulation`).
    """

    def __init__(
        self,
        model: nn.Module,
        criterion: nn.Module,
        optimizer: torch.optim.Optimizer,
        context: DistributedContext,
        amp_dtype: torch.dtype | None = None,
        grad_clip: float | None = None,
        compile: bool = False,
        accumulate_steps: int = 1,
    ) -> None:
        self.optimizer = optimizer
        self.context = context
        self.grad_clip = grad_clip or None
        self.compile = compile
        self.accumulate_steps = accumulate_steps
        self._module = _ModelAndLoss(model, criterion, amp_dtype)
        device = next(model.parameters()).device
        # float16 needs loss scaling; bfloat16 has float32's range and needs none
        self.scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
        self.skipped_steps = torch.zeros((), dtype=torch.int64, device=device)  # steps the scaler skipped, so far
        self._one = torch.ones((), device=device)
        self._trainable: list[nn.Parameter] = []
        self._forward: Callable[[Tensor, Tensor], Tensor] | None = None
        self._ddp: DistributedDataParallel | None = None
        self._signature: tuple[bool, ...] | None = None

    def refresh(self) -> None:
        """Take the current `requires_grad` flags into account (call after freezing or thawing parts)."""
        signature = tuple(param.requires_grad for param in self._module.parameters())
        if signature == self._signature:
            return
        self._signature = signature
        self._trainable = [param for param in self._module.parameters() if param.requires_grad]
        forward: nn.Module = self._module
        self._ddp = None
        if self.context.enabled:
            device = next(self._module.parameters()).device
            device_ids = [device.index] if device.type == "cuda" else None
            forward = self._ddp = DistributedDataParallel(forward, device_ids=device_ids)
        self._forward = torch.compile(forward) if self.compile else forward

    def zero_grad(self) -> None:
        """Clear the gradients before the first micro-batch of a step."""
        self.optimizer.zero_grad(set_to_none=True)

    def forward_backward(self, images: Tensor, labels: Tensor, weight: float = 1.0, sync: bool = True) -> Tensor:
        """Loss of the batch (detached, on the device); `weight` x its gradients accumulated in `.grad`.

        Args:
            images: `(B, C, H, W)` on the device.
            labels: `(B,)` on the device.
            weight: the loss's factor in the step (1 / micro-batches of the step).
            sync: average the gradients over ranks now; False for the micro-batches before a step's
                last (DDP's `no_sync`: one all-reduce per optimizer step).
        """
        if self._forward is None:
            self.refresh()
        assert self._forward is not None  # set by refresh()
        with nullcontext() if sync or self._ddp is None else self._ddp.no_sync():
            loss = self._forward(images, labels)
            scaled = loss * weight
            (scaled if self.scaler is None else self.scaler.scale(scaled)).backward()
        return loss.detach()

    def apply(self) -> Tensor:
        """The optimizer step on the accumulated gradients, clipped; returns whether the scaler skipped it.

        The result is a device bool (never read back here); `skipped_steps` counts the skipped steps.
        Without loss scaling no step is skipped.
        """
        if self.scaler is None:
            self._clip()
            self.optimizer.step()
            return torch.zeros((), dtype=torch.bool, device=self._one.device)
        scale = self.scaler.scale(self._one)  # the scale as a device tensor: no sync
        self.scaler.unscale_(self.optimizer)  # clipping sees the true gradients
        self._clip()
        self.scaler.step(self.optimizer)  # skipped when a gradient is inf or NaN
        self.scaler.update()  # lowers the scale after a skipped step, else keeps or grows it
        skipped = self.scaler.scale(self._one) < scale
        self.skipped_steps += skipped
        return skipped

    def __call__(self, images: Tensor, labels: Tensor) -> Tensor:
        """One optimizer step on the batch; returns its loss (detached, on the device)."""
        self.zero_grad()
        loss = self.forward_backward(images, labels)
        self.apply()
        return loss

    def _clip(self) -> None:
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self._trainable, self.grad_clip)


class LossTracker:
    """The losses of one epoch, summed on the device, and the first step whose loss was not finite.

    `add` launches a few tiny device ops and never waits for the device; `mean` and
    `first_non_finite` read back once (call them every few hundred steps, or at the epoch's end).

    Args:
        device: where the losses are.
        skip_non_finite: under loss scaling (fp16) the scaler skips a step whose loss or gradients
            overflow: a non-finite loss is left out of the sum and is no error.
    """

    def __init__(self, device: torch.device, skip_non_finite: bool = False) -> None:
        self.steps = 0
        self.skip_non_finite = skip_non_finite
        self._total = torch.zeros((), dtype=torch.float32, device=device)
        self._count = torch.zeros((), dtype=torch.float32, device=device)
        self._first_bad = torch.full((), -1, dtype=torch.int64, device=device)
        self._bad_value = torch.zeros((), dtype=torch.float32, device=device)

    def add(self, loss: Tensor) -> None:
        """Count one step's scalar loss."""
        loss = loss.detach().float()
        finite = torch.isfinite(loss)
        if self.skip_non_finite:
            self._total += torch.where(finite, loss, 0.0)
            self._count += finite
        else:
            newly_bad = ~finite & (self._first_bad < 0)
            self._first_bad = torch.where(newly_bad, self.steps, self._first_bad)
            self._bad_value = torch.where(newly_bad, loss, self._bad_value)
            self._total += loss
            self._count += 1
        self.steps += 1

    def total(self) -> Tensor:
        """The sum of the losses so far, a device scalar (for an all-reduce over ranks)."""
        return self._total

    def count(self) -> Tensor:
        """How many losses `total` sums, a device scalar (for an all-reduce over ranks)."""
        return self._count

    def mean(self) -> float:
        """Mean loss of the steps so far (one read-back)."""
        return float(self._total) / max(float(self._count), 1.0)

    def first_non_finite(self) -> tuple[int, float] | None:
        """(0-based step, value) of the first non-finite loss so far, or None (one read-back)."""
        step = int(self._first_bad)
        return None if step < 0 else (step, float(self._bad_value))
