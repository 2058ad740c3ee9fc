"""Training runs for tests, through the library (`retrieval.train.runs`) as `retrieval train` runs them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from retrieval.train.runs import TrainingReport, TrainRequest, run_training
from retrieval.train.trainer import Trainer

# The closing lines of `retrieval train` (and `evaluate`): Recall@K for K = 1, 2, 4, 8, then MAP@R, four decimals, last.
FINAL_LINES = re.compile("".join(rf"Recall@{k}: \d\.\d{{4}}\n" for k in (1, 2, 4, 8)) + r"MAP@R: \d\.\d{4}\n$")


def train(
    overrides: Sequence[str] = (),
    output_dir: Path | None = None,
    resume: Path | None = None,
    config: Path | None = None,
    seeds: Sequence[int] = (),
) -> tuple[TrainingReport, str]:
    """Train (or resume) as `request` says; the report and the lines said as the runs ended, as they print."""
    lines: list[str] = []
    request = TrainRequest(None if config is None else str(config), tuple(overrides), output_dir, resume, tuple(seeds))
    report = run_training(request, lines.append)
    return report, "\n".join(lines) + "\n"


def train_interrupted(
    monkeypatch: pytest.MonkeyPatch,
    at_epoch: int,
    overrides: Sequence[str],
    output_dir: Path,
    config: Path | None = None,
) -> None:
    """Train until epoch `at_epoch` (0-based) starts, then stop as Ctrl-C would: `last.pt` holds the epoch before."""
    original = Trainer._train_epoch

    def interrupt(trainer: Trainer, epoch: int) -> object:
        if epoch == at_epoch:
            raise KeyboardInterrupt
        return original(trainer, epoch)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_train_epoch", interrupt)
        with pytest.raises(KeyboardInterrupt):
            train(overrides, output_dir, config=config)
