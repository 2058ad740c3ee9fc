"""`TrainSettings`: what the training loop does with its parts (epochs, evaluation, selection, records)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.config import SELECTION_METRICS, ModelConfig, TrainConfig

__all__ = ["TrainSettings"]


@dataclass(frozen=True)
class TrainSettings:
    """The loop's own settings; the parts (model, loss, loader, ...) come in `TrainingParts`.

    With a `model_config`, every epoch writes `checkpoints/last.pt` and the selected `best.pt`
    (`retrieval.checkpoint.Checkpoint`, which rebuilds the `Embedder` from it). Without one (a
    custom `nn.Module` the toolkit cannot rebuild) no checkpoint file is written; the selected
    epoch's weights are kept in memory either way, and the test set is scored on them at the end.
    """

    run_dir: Path  # where metrics.jsonl, result.json, environment.json, plots/ and checkpoints/ go
    epochs: int  # full passes over the training set
    seed: int = 0  # every epoch's randomness is seeded from (seed, epoch, rank): exact resume
    eval_every: int = 1  # validate every N epochs (and always after the last)
    select_on: str = "recall@1"  # recall@1 | map@r: the validation metric that picks the result
    select_on_test: bool = False  # pick the result on the TEST set (optimistic; labelled so)
    log_test: bool = False  # also score the test set every epoch (logged, never used for selection)
    freeze_backbone_epochs: int = 0  # first epochs with the model's `backbone` frozen (needs one)
    freeze_bn: bool = False  # keep BatchNorm statistics and affine parameters frozen
    ema: float | None = None  # decay of a weight average evaluated and selected beside the raw weights; None: off
    loggers: tuple[str, ...] = ()  # experiment trackers the records are mirrored to (retrieval.train.trackers)
    model_config: ModelConfig | None = None  # rebuilds the model from a checkpoint; None: no checkpoint files
    run_config: dict[str, Any] | None = None  # the resolved config: config.yaml and the checkpoints' copy

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.eval_every < 1:
            raise ValueError(f"epochs and eval_every must be >= 1, got {self.epochs} and {self.eval_every}")
        if self.select_on not in SELECTION_METRICS:
            raise ValueError(f"select_on must be one of {', '.join(SELECTION_METRICS)}, got {self.select_on!r}")

    @classmethod
    def from_config(
        cls,
        train: TrainConfig,
        run_dir: Path,
        model_config: ModelConfig | None = None,
        run_config: dict[str, Any] | None = None,
    ) -> TrainSettings:
        """The loop settings of the `train` config section."""
        return cls(
            run_dir=Path(run_dir),
            epochs=train.epochs,
            seed=train.seed,
            eval_every=train.eval_every,
            select_on=train.select_on,
            select_on_test=train.select_on_test,
            log_test=train.log_test,
            freeze_backbone_epochs=train.freeze_backbone_epochs,
            freeze_bn=train.freeze_bn,
            ema=train.ema,
            loggers=tuple(train.loggers),
            model_config=model_config,
            run_config=run_config,
        )
