"""The checkpoint `retrieval pretrain --resume RUN_DIR` continues from, found without torch (checked at once)."""

from __future__ import annotations

from pathlib import Path

from retrieval.errors import UserError

__all__ = ["missing_checkpoint", "resumed_checkpoint"]


def resumed_checkpoint(run_dir: Path) -> Path:
    """`RUN_DIR/checkpoints/last.pt`, the pretraining run's checkpoint that a resume reads.

    Raises:
        UserError: no file there (`missing_checkpoint`).
    """
    path = run_dir / "checkpoints" / "last.pt"
    if not path.is_file():
        raise UserError(missing_checkpoint(path))
    return path


def missing_checkpoint(path: Path) -> str:
    """What is wrong when no pretraining checkpoint is at `path`, and how to fix it."""
    return f"no pretraining checkpoint at {path}; give a `retrieval pretrain` run directory"
