"""The learning-rate schedule: frozen-backbone epochs, linear warm-up, then cosine or step decay, or none.

The factor multiplies every parameter group's base rate (backbone, head and proxies alike), so
their ratio (`train.proxy_lr_mult`) holds throughout.
"""

from __future__ import annotations

import math

from retrieval.config import SCHEDULES

__all__ = ["LrSchedule", "lr_factor"]


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up from ~0 to 1 over `warmup_steps`, then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


class LrSchedule:
    """The factor of every optimizer step of a run.

    While the backbone is frozen (the first `frozen_steps`), head and proxies train at the full
    rate; the warm-up starts when the backbone thaws. After the warm-up, `cosine` decays to 0 at
    the last step; `step` multiplies the rate by `step_gamma` every `step_epochs` epochs, counted
    from the start of the run (torch's `StepLR`), so `step_epochs: 20` on 60 epochs gives 1, 0.1,
    0.01 for epochs 1-20, 21-40, 41-60. `constant` keeps the full rate after the warm-up (what the
    plain timm + PML scripts do; on short from-scratch budgets it learns faster: docs/experiments/glyphs.md,
    "What made the difference: one knob at a time").

    Args:
        kind: `cosine`, `step` or `constant`.
        steps_per_epoch: optimizer steps in one epoch (>= 1).
        epochs: epochs of the run.
        warmup_epochs: length of the linear warm-up, in epochs (fractions allowed).
        frozen_epochs: epochs with the backbone frozen, before the warm-up.
        step_epochs: `step` only: epochs between two decays (>= 1).
        step_gamma: `step` only: factor of each decay.
    """

    def __init__(
        self,
        kind: str,
        steps_per_epoch: int,
        epochs: int,
        warmup_epochs: float,
        frozen_epochs: int = 0,
        step_epochs: int = 1,
        step_gamma: float = 0.1,
    ) -> None:
        if kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {kind!r}; valid: {', '.join(SCHEDULES)}")
        self.kind = kind
        self.steps_per_epoch = steps_per_epoch
        self.frozen_steps = min(frozen_epochs, epochs) * steps_per_epoch
        self.total_steps = epochs * steps_per_epoch
        self.warmup_steps = round(warmup_epochs * steps_per_epoch)
        self.step_epochs = step_epochs
        self.step_gamma = step_gamma

    def factor(self, step: int) -> float:
        """The lr factor of optimizer step `step` (0-based, counted over the whole run)."""
        if step < self.frozen_steps:
            return 1.0
        thawed = step - self.frozen_steps
        if self.kind == "cosine":
            return lr_factor(thawed, self.warmup_steps, self.total_steps - self.frozen_steps)
        warmup = (thawed + 1) / self.warmup_steps if thawed < self.warmup_steps else 1.0
        if self.kind == "constant":
            return warmup
        decays = (step // self.steps_per_epoch) // self.step_epochs
        return warmup * self.step_gamma**decays
