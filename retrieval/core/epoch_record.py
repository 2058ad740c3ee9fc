"""`EpochRecord`: one line of a run's `metrics.jsonl`, the record of a trained epoch, read back strictly.

The trainer and the pretrainer append one per epoch; a resumed run, the plots (`retrieval.report.plots`)
and a sweep's report read them back. A line is the flat JSON object it has always been: the fields
below, then any number of scores (`val/recall@1`, `ema/test/few/map@r`: a number each) and per-sample
statistics of the loss (`c`, `scale`: their `Quantiles`), named by the splits and the loss that made
them. A damaged or hand-edited line is one `UserError` naming the file, the line and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from retrieval.errors import UserError, short_repr
from retrieval.validation import Record, ValidationError, user_error

__all__ = [
    "METRICS_FILE",
    "EpochRecord",
    "Gating",
    "GradientSums",
    "Histogram",
    "LossDiagnostics",
    "Quantiles",
    "StepTimes",
]

METRICS_FILE = "metrics.jsonl"


class _Part(Record):
    """Base of a record's nested parts: keys a later toolkit adds are ignored, so its files still read here."""

    model_config = ConfigDict(extra="ignore", strict=True)


class Quantiles(_Part):
    """One epoch's values of a per-sample statistic (`c`, `b`, `scale`): quantiles (as numpy's) and the mean."""

    min: float
    p10: float = math.nan  # the records written before the plotted diagnostics have no p10
    median: float
    p90: float
    max: float
    mean: float


class Histogram(_Part):
    """Counts on equal bins over `range` (values outside are clamped into the end bins)."""

    range: tuple[float, float] = Field(strict=False)  # a JSON list; strict mode takes tuples from Python only
    counts: list[int]


class Gating(_Part):
    """The share of samples a gated loss down-weighted (w_i < 1) and cut off entirely (w_i == 0)."""

    fraction_gated: float
    fraction_zero: float


class GradientSums(_Part):
    """The logit-gradient norm summed per p_t bucket and per correct / wrong prediction, with the sample counts."""

    p_t_buckets: list[str] = []  # the buckets' names, as the plots label them (absent: numbered)
    p_t_sum: list[float]
    p_t_count: list[int]
    correct_sum: float
    wrong_sum: float
    correct_count: int
    wrong_count: int


class StepTimes(_Part):
    """Seconds an epoch spent training, evaluating and writing its files."""

    train: float
    eval: float = 0.0  # the pretrainer does not evaluate
    write: float = 0.0


class _Diagnosed(Record):
    """The loss's diagnostics a record holds (`retrieval.train.diagnostics`); each only when the loss gave its inputs.

    Per-sample statistics are the extra keys, named as the loss's `last_stats` names them.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    c_hist: Histogram | None = None
    b_hist: Histogram | None = None
    b_median: dict[str, float] | None = None  # median b_i per training-frequency group (head / mid / tail)
    gating: Gating | None = None
    grad: GradientSums | None = None

    def statistic(self, name: str) -> Quantiles | None:
        """The quantiles of per-sample statistic `name`; None when the loss did not record it."""
        value = (self.model_extra or {}).get(name)
        return value if isinstance(value, Quantiles) else None


class LossDiagnostics(_Diagnosed):
    """The loss's part of an epoch record, as `EpochDiagnostics.summary` gives it."""

    __pydantic_extra__: dict[str, Quantiles] = Field(init=False)  # per-sample statistics (`c`, `b`, `w`, `scale`)


class EpochRecord(_Diagnosed):
    """One epoch of a run: its loss and lr, its scores when it was evaluated, and what it cost."""

    __pydantic_extra__: dict[str, float | Quantiles] = Field(
        init=False
    )  # scores (`val/recall@1`) and the loss's statistics

    epoch: int  # 1-based
    loss: float  # mean training loss over every process
    lr: float  # the first parameter group's at the end of the epoch
    images: int | None = None  # training images seen (the pretrainer keeps it; the trainer reports the rate)
    skipped_steps: int | None = None  # train.amp fp16: optimizer steps skipped for inf/NaN gradients
    loss_scale: float | None = None  # train.amp fp16: the loss scaler's scale at the end of the epoch
    better_weights: Literal["raw", "ema"] | None = None  # train.ema: which weights scored better on selection
    time: StepTimes | None = None
    images_per_second: float | None = None
    seconds: float | None = None  # the whole epoch, training to writing

    def score(self, key: str) -> float | None:
        """Score `key` (`val/recall@1`), or a nested number (`gating/fraction_zero`); None when absent."""
        value = (self.model_extra or {}).get(key)
        if isinstance(value, float):
            return value
        head, _, tail = key.partition("/")
        nested = getattr(self, head, None) if head in type(self).model_fields else None
        if isinstance(nested, Mapping):
            return nested.get(tail)
        found = getattr(nested, tail, None) if isinstance(nested, Record) else None
        return found if isinstance(found, float) else None

    @property
    def scores(self) -> dict[str, float]:
        """Every score of the epoch, by key (`val/recall@1`, ...)."""
        return {key: value for key, value in (self.model_extra or {}).items() if isinstance(value, float)}

    def with_scores(self, scores: Mapping[str, float]) -> EpochRecord:
        """The record with `scores` added (keys `split/metric`, as `score` reads them)."""
        return self.model_copy(update={key: float(value) for key, value in scores.items()})

    def line(self) -> str:
        """The record as one JSON line of `metrics.jsonl` (absent parts have no key)."""
        return json.dumps(self.model_dump(mode="json", exclude_none=True))

    @classmethod
    def read(cls, path: Path) -> list[EpochRecord]:
        """The records of the `metrics.jsonl` at `path`, in order.

        Raises:
            UserError: no file (not a run directory), or a line that is not a record, naming the line
                (`FILE:LINE`) and the field.
        """
        if not path.is_file():
            raise UserError(f"{path} not found; pass a run directory written by `retrieval train`")
        lines = enumerate(path.read_text().splitlines(), start=1)
        return [cls._read_line(text, f"{path}:{number}") for number, text in lines if text.strip()]

    @classmethod
    def _read_line(cls, text: str, where: str) -> EpochRecord:
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            error = exc.errors()[0]
            key = str(error["loc"][0]) if error["loc"] else None
            fix = "restore the file, or delete the line and resume the run"
            if key is None or key in cls.model_fields or error["type"] == "extra_forbidden":
                raise user_error(cls, exc, where, fix) from None
            raise UserError(
                f"{where}.{key} must be a number (a score) or the quantiles min, p10, median, p90, max and mean "
                f"(a per-sample statistic), got {short_repr(error['input'])}; {fix}"
            ) from None
