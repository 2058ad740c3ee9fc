"""Gradient accumulation: which micro-batches of an epoch make up each optimizer step.

`train.accumulate_steps: N` makes one optimizer step (and one lr-schedule step and one EMA update)
of every N micro-batches of `data.batch_size` images. Each micro-batch's loss is multiplied by
1 / (micro-batches of its step), so with a mean-reduced loss and micro-batches of equal size the
step's gradient is the mean over all their images: the gradient of one batch N times larger for
losses whose terms are per image (the proxy losses). Pair losses form their pairs inside each
micro-batch only, so for them it is not (the trainer warns). An epoch whose micro-batch count is
not a multiple of N ends with a shorter step, its losses weighted by 1 / its own size: every image
of the epoch trains, and the epoch has ceil(micro-batches / N) optimizer steps.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WHOLE_STEP", "MicroBatch", "optimizer_steps", "plan_micro_batches"]


@dataclass(frozen=True)
class MicroBatch:
    """Where one micro-batch sits in its optimizer step."""

    first: bool  # the step's first micro-batch: the lr is set and the gradients cleared before it
    last: bool  # its last: the optimizer steps after its backward (and DDP averages the gradients)
    weight: float  # the factor of its loss: 1 / micro-batches of its step


WHOLE_STEP = MicroBatch(first=True, last=True, weight=1.0)  # a batch that is a whole optimizer step


def optimizer_steps(micro_batches: int, accumulate_steps: int) -> int:
    """Optimizer steps of an epoch of `micro_batches`, the last one possibly shorter: ceil(micro / N)."""
    return -(-micro_batches // accumulate_steps)


def plan_micro_batches(micro_batches: int, accumulate_steps: int) -> list[tuple[int, MicroBatch]]:
    """(0-based optimizer step within the epoch, `MicroBatch`) of every micro-batch of an epoch, in order.

    >>> [(step, m.weight) for step, m in plan_micro_batches(5, 2)]
    [(0, 0.5), (0, 0.5), (1, 0.5), (1, 0.5), (2, 1.0)]
    """
    plan = []
    for index in range(micro_batches):
        step, position = divmod(index, accumulate_steps)
        size = min(accumulate_steps, micro_batches - step * accumulate_steps)
        plan.append((step, MicroBatch(first=position == 0, last=position == size - 1, weight=1.0 / size)))
    return plan
