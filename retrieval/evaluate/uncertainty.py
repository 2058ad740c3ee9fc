"""Uncertainty of an evaluation: class-bootstrap intervals, per-query files, paired comparisons, spreads over seeds.

Every evaluation keeps its per-query scores (`per_query.npz` in a run directory) so that two
runs on the same test queries can be compared pair-wise later (`retrieval compare`) and every
reported Recall@1 / MAP@R carries a 95% interval from resampling classes
(`retrieval.metrics.bootstrap`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from retrieval.errors import UserError
from retrieval.metrics.bootstrap import LEVEL, NUM_RESAMPLES, Interval, bootstrap_interval, paired_difference
from retrieval.metrics.ranking import PerQuery
from retrieval.runtime.files import atomic_write

__all__ = [
    "INTERVAL_METRICS",
    "PER_QUERY_FILE",
    "QueryValues",
    "Uncertainty",
    "compare_runs",
    "format_mean_sd",
    "format_uncertainty",
    "load_query_values",
    "record_uncertainty",
    "save_query_values",
    "uncertainty_summary",
]

PER_QUERY_FILE = "per_query.npz"
# The metrics that get intervals and comparisons: config key -> printed name.
INTERVAL_METRICS = {"recall@1": "Recall@1", "map@r": "MAP@R"}


class QueryValues:
    """Per-query values of the interval metrics with the identity of the queries they belong to.

    Args:
        rows: (Q,) each query's row in its evaluation split.
        labels: (Q,) each query's class label; `(Q, C)` multi-hot rows become one label per distinct
            label set (the bootstrap then resamples label sets).
        values: metric key (`recall@1`, `map@r`) -> (Q,) float64 per-query values.
    """

    def __init__(self, rows: np.ndarray, labels: np.ndarray, values: dict[str, np.ndarray]) -> None:
        self.rows = np.asarray(rows)
        labels = np.asarray(labels)
        self.labels = np.unique(labels, axis=0, return_inverse=True)[1].reshape(-1) if labels.ndim == 2 else labels
        self.values = {key: np.asarray(value, dtype=np.float64) for key, value in values.items()}

    @classmethod
    def from_scores(cls, scores: PerQuery) -> QueryValues:
        """Recall@1 hits and AP@R of every scored query."""
        values = {"recall@1": scores.hits(1), "map@r": scores.average_precision}
        return cls(scores.rows, scores.labels, values)

    @property
    def num_classes(self) -> int:
        """Query classes, the units the bootstrap resamples."""
        return len(np.unique(self.labels))


class Uncertainty(BaseModel):
    """Recall@1 and MAP@R with their class-bootstrap intervals: the record `result.json` and `--json` files hold.

    The metric fields are spelled in the files as everywhere else (`recall@1`, `map@r`), each an
    `[estimate, low, high]` triple.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    level: float  # the interval's coverage, 0.95
    resamples: int  # bootstrap resamples of the classes
    classes: int  # query classes, the units resampled
    seed: int  # the resamples' seed
    recall_at_1: Interval = Field(alias="recall@1")
    map_at_r: Interval = Field(alias="map@r")

    def interval(self, key: str) -> Interval:
        """The interval of `key`, one of `INTERVAL_METRICS`."""
        return self.recall_at_1 if key == "recall@1" else self.map_at_r

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return self.model_dump(mode="json", by_alias=True)


def uncertainty_summary(values: QueryValues, seed: int = 0) -> Uncertainty:
    """Recall@1 and MAP@R of `values` with 95% class-bootstrap intervals."""
    intervals = {key: bootstrap_interval(values.values[key], values.labels, seed=seed) for key in INTERVAL_METRICS}
    return Uncertainty.model_validate(
        {"level": LEVEL, "resamples": NUM_RESAMPLES, "classes": values.num_classes, "seed": seed, **intervals}
    )


def format_uncertainty(summary: Uncertainty, label: str = "") -> str:
    """One line: `95% CI (class bootstrap, 1000 resamples of 150 classes): Recall@1 0.2000 [0.1700, 0.2300]  ...`.

    It never starts with `Recall@` or `MAP@R:`, so scripts that read the closing lines are not confused.
    """
    suffix = f"  ({label})" if label else ""
    parts = "  ".join(f"{name} {summary.interval(key).format()}" for key, name in INTERVAL_METRICS.items())
    head = f"{summary.level:.0%} CI (class bootstrap, {summary.resamples} resamples of {summary.classes} classes)"
    return f"{head}: {parts}{suffix}"


def record_uncertainty(run_dir: Path, scores: PerQuery) -> Uncertainty:
    """Save a run's per-query values to `run_dir/per_query.npz` and return its `uncertainty_summary`."""
    values = QueryValues.from_scores(scores)
    save_query_values(Path(run_dir) / PER_QUERY_FILE, values)
    return uncertainty_summary(values)


def save_query_values(path: Path, values: QueryValues) -> None:
    """Write `values` as an `.npz` (rows, labels, one array per metric), atomically.

    `np.savez` gets an open file: given a name, it would append `.npz` to the temporary one.
    """
    # Any: numpy's stub lets `**arrays` bind to savez's `allow_pickle: bool` as well as to the array names.
    arrays: dict[str, Any] = {"rows": values.rows, "labels": values.labels, **values.values}
    with atomic_write(path) as temporary, temporary.open("wb") as handle:
        np.savez(handle, **arrays)


def load_query_values(path: Path) -> QueryValues:
    """Read per-query values from a run directory (its `per_query.npz`) or from an `.npz` file.

    Raises:
        UserError: if there is no such file or it lacks a metric.
    """
    path = Path(path)
    file = path / PER_QUERY_FILE if path.is_dir() else path
    if not file.is_file():
        raise UserError(
            f"no per-query scores at {file}; pass a run directory trained by this version of retrieval, "
            "or the file written by `retrieval evaluate --per-query FILE.npz`"
        )
    with np.load(file, allow_pickle=False) as data:
        missing = [key for key in ("rows", "labels", *INTERVAL_METRICS) if key not in data]
        if missing:
            raise UserError(f"{file} lacks {', '.join(missing)}; re-run the evaluation with this version")
        return QueryValues(data["rows"], data["labels"], {key: data[key] for key in INTERVAL_METRICS})


def compare_runs(a: QueryValues, b: QueryValues, seed: int = 0) -> dict[str, Interval]:
    """Paired difference A - B of Recall@1 and MAP@R on the same queries, with class-bootstrap intervals.

    Raises:
        UserError: if the runs did not score the same queries (rows and labels must match).
    """
    if not (np.array_equal(a.rows, b.rows) and np.array_equal(a.labels, b.labels)):
        raise UserError(
            f"the two runs scored different queries ({len(a.rows)} vs {len(b.rows)}, or other rows/labels); "
            "compare runs evaluated on the same test split"
        )
    return {key: paired_difference(a.values[key], b.values[key], a.labels, seed=seed) for key in INTERVAL_METRICS}


def format_mean_sd(scores: Sequence[float]) -> str:
    """`0.8123 ± 0.0045`: mean and sample standard deviation (0 for a single score) of one metric over seeds."""
    spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return f"{statistics.mean(scores):.4f} ± {spread:.4f}"
