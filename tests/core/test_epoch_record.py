"""`metrics.jsonl` lines are `EpochRecord`s: old lines still read; a damaged line names its file, line and field."""

from __future__ import annotations

import json
import math

import pytest

from retrieval.core.epoch_record import EpochRecord, Quantiles
from retrieval.errors import UserError

# A line as the trainer of the diagnostics release wrote it (train.ema, fp16 and a gated proxy loss).
WRITTEN = {
    "epoch": 2,
    "loss": 0.5,
    "lr": 1e-4,
    "skipped_steps": 0,
    "loss_scale": 65536.0,
    "c": {"min": 1.0, "p10": 1.1, "median": 1.2, "p90": 1.5, "max": 1.9, "mean": 1.25},
    "c_hist": {"range": [1.0, 2.0], "counts": [3, 1]},
    "b_median": {"head": 0.5},
    "gating": {"fraction_gated": 0.25, "fraction_zero": 0.0},
    "val/recall@1": 0.75,
    "ema/val/recall@1": 0.8,
    "val/tail/recall@1": 0.5,
    "better_weights": "ema",
    "time": {"train": 1.5, "eval": 0.25, "write": 0.125},
    "images_per_second": 640.0,
    "seconds": 1.875,
}


def _write(tmp_path, *records):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_a_written_line_reads_back_and_is_written_the_same(tmp_path):
    (record,) = EpochRecord.read(_write(tmp_path, WRITTEN))
    assert record.score("ema/val/recall@1") == 0.8 and record.score("gating/fraction_gated") == 0.25
    assert record.score("b_median/head") == 0.5 and record.score("val/missing") is None
    assert record.statistic("c") == Quantiles(**WRITTEN["c"]) and record.time is not None
    assert json.loads(record.line()) == WRITTEN


def test_a_line_from_before_the_diagnostics_still_reads(tmp_path):
    old = {"epoch": 1, "loss": 1.0, "lr": 0.1, "c": {"min": 1, "median": 1.5, "p90": 1.8, "max": 2, "mean": 1.5}}
    first, second = EpochRecord.read(_write(tmp_path, old, "", {**old, "epoch": 2, "seconds": 3}))
    quantiles = first.statistic("c")
    assert quantiles is not None and math.isnan(quantiles.p10) and second.seconds == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({**WRITTEN, "epoch": "two"}, r"metrics\.jsonl:2\.epoch must be int, got 'two'"),
        ({**WRITTEN, "better_weights": "best"}, r"metrics\.jsonl:2\.better_weights must be one of raw, ema, null"),
        ({k: v for k, v in WRITTEN.items() if k != "lr"}, r"metrics\.jsonl:2\.lr is missing"),
        (
            {**WRITTEN, "val/map@r": "high"},
            r"metrics\.jsonl:2\.val/map@r must be a number \(a score\) or the quantiles",
        ),
        ('{"epoch": 2, "loss"', r"metrics\.jsonl:2 is not valid JSON"),
    ],
    ids=["type", "choice", "missing", "score", "truncated"],
)
def test_a_damaged_line_is_one_line_naming_the_file_line_and_field(tmp_path, line, message):
    path = _write(tmp_path, WRITTEN, line)
    with pytest.raises(UserError, match=message) as error:
        EpochRecord.read(path)
    assert "\n" not in str(error.value) and "resume the run" in str(error.value)


def test_no_file_is_not_a_run_directory(tmp_path):
    with pytest.raises(UserError, match="metrics.jsonl not found; pass a run directory"):
        EpochRecord.read(tmp_path / "metrics.jsonl")
