"""A checkpoint's presence, checked without torch: what every command that reads one answers before PyTorch loads.

`retrieval.checkpoint.Checkpoint.read` says the same words when it finds no file, so a missing
checkpoint reads alike whether it is caught early or late. Apart from `retrieval.checkpoint` (torch) so
that the command line's parsers, `retrieval serve`'s too, import it without the training code.
"""

from __future__ import annotations

from pathlib import Path

from retrieval.errors import UserError

__all__ = ["existing_checkpoint", "missing_checkpoint"]


def existing_checkpoint(path: Path) -> Path:
    """`path`, refused when no file is there.

    Raises:
        UserError: no file at `path` (`missing_checkpoint`).
    """
    if not path.is_file():
        raise UserError(missing_checkpoint(path))
    return path


def missing_checkpoint(path: str | Path) -> str:
    """What is wrong when no checkpoint is at `path`, and how to fix it."""
    return f"checkpoint not found: {path}; pass a run's checkpoints/best.pt or last.pt"
