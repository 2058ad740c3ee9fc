"""Where a resumed training run starts: its `last.pt`, the `best.pt` beside it, its config and directory, done or not.

`retrieval train --resume RUN_DIR|CKPT` continues from a run directory's `checkpoints/last.pt` (or the
file named). The selection so far (the best epoch's weights, raw or averaged) lives in `best.pt`, so
a resume pairs the two; a run whose last epoch is trained already is complete, and resuming it scores
its selected checkpoint again instead of training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config
from retrieval.errors import UserError

__all__ = ["ResumePoint", "resume_point"]


@dataclass(frozen=True)
class ResumePoint:
    """A run to continue: its checkpoints, the config it continues with and the directory it writes.

    Attributes:
        last: the resumable checkpoint (weights, optimizer, counters).
        best: the `best.pt` beside it, the selection so far; None when the run wrote none yet.
        config: the run's own config, or the `--config` file, with the `--set` overrides.
        run_dir: where the run's files go (by default the run directory `last` is in).
    """

    last: Checkpoint
    best: Checkpoint | None
    config: Config
    run_dir: Path

    @property
    def complete(self) -> str | None:
        """`run already complete (epoch N of M)` when every epoch is trained already, else None."""
        trained, epochs = self.last.epoch + 1, self.config.train.epochs
        return f"run already complete (epoch {trained} of {epochs})" if trained >= epochs else None


def resume_point(
    path: Path, config_file: str | None = None, overrides: Sequence[str] = (), output_dir: Path | None = None
) -> ResumePoint:
    """The run that `path` (a `last.pt`) continues, paired with the `best.pt` beside it.

    Args:
        path: the checkpoint resumed from.
        config_file: a config that replaces the run's own (None: the run's); `overrides` apply either way.
        output_dir: where the continued run writes (None: the run directory `path` is in).

    Raises:
        UserError: `path` holds weights only (a `best.pt`), or as `Checkpoint.read` and `Checkpoint.config`.
    """
    last = Checkpoint.read(path)
    if not last.resumable:
        raise UserError(
            f"{path} holds the weights for evaluation and indexing only (no optimizer state); "
            "resume from the run directory or its checkpoints/last.pt"
        )
    best_path = path.with_name("best.pt")
    best = Checkpoint.read(best_path) if best_path.is_file() else None
    config = last.config(config_file, overrides)
    return ResumePoint(last, best, config, output_dir or path.resolve().parent.parent)
