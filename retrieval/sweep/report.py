"""Summarize a sweep's finished runs: `sweep.csv`, `sweep.md` and `sweep.png`.

One row per grid cell: the varied values, test Recall@1 / MAP@R as mean ± sample sd over seeds
(the seed summary of `retrieval train --seeds`), the 95% class-bootstrap interval of the
seed-averaged per-query scores (how much the test *classes* alone move the figure), the
validation score that selected each run's checkpoint, the selected and trained epochs, and the
seconds spent training and validating. The cell to pick is the best on validation: it is
marked, never the best on test.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from retrieval.evaluate.uncertainty import INTERVAL_METRICS, QueryValues, format_mean_sd, load_query_values
from retrieval.metrics.bootstrap import Interval, bootstrap_interval
from retrieval.report.plots import read_records, save_figure
from retrieval.runtime.files import write_text
from retrieval.sweep.grid import Cell
from retrieval.train.result import RunResult

__all__ = ["CellSummary", "summarize", "write_reports"]


@dataclass
class CellSummary:
    """The finished seeds of one grid cell."""

    values: tuple[tuple[str, str], ...]  # (key, value) of the varied parameters
    seeds: list[int]  # finished seeds
    results: list[RunResult]  # each seed's result.json
    epochs: list[int]  # epochs each seed trained
    seconds: list[float]  # training + validation seconds of each seed (metrics.jsonl, summed)
    intervals: dict[str, Interval]  # seed-averaged per-query score with its 95% class-bootstrap CI

    def test(self, key: str) -> list[float]:
        """One test metric over the finished seeds."""
        return [result.test[key] for result in self.results]

    @property
    def validation(self) -> list[float]:
        """The selection metric's validation value of each seed (empty when nothing was selected)."""
        return [r.selection_value for r in self.results if r.selection_value is not None]


def summarize(cells: Sequence[Cell]) -> list[CellSummary]:
    """Group finished cells by their grid values (grid order); cells without a finished seed are left out."""
    groups: dict[tuple[tuple[str, str], ...], list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.values, []).append(cell)
    summaries = []
    for values, members in groups.items():
        done = [cell for cell in members if cell.is_finished]
        if not done:
            continue
        results = [RunResult.read(cell.directory) for cell in done]
        records = [read_records(cell.directory) for cell in done]
        summaries.append(
            CellSummary(
                values=values,
                seeds=[cell.seed for cell in done],
                results=results,
                epochs=[len(r) for r in records],
                seconds=[sum(record.seconds or 0.0 for record in r) for r in records],
                intervals=_seed_averaged_intervals([cell.directory for cell in done]),
            )
        )
    return summaries


def write_reports(summaries: Sequence[CellSummary], output_dir: Path, select_on: str) -> list[Path]:
    """Write `sweep.csv`, `sweep.md` and `sweep.png` into `output_dir`, each atomically.

    Args:
        summaries: from `summarize`, at least one.
        output_dir: the sweep directory.
        select_on: the validation metric that selected checkpoints (`train.select_on`), named in the table.

    Returns:
        The paths written.
    """
    paths = [output_dir / "sweep.csv", output_dir / "sweep.md", output_dir / "sweep.png"]
    write_text(paths[0], _csv(summaries))
    write_text(paths[1], _markdown(summaries, select_on))
    _plot(summaries, paths[2])
    return paths


def _seed_averaged_intervals(directories: list[Path]) -> dict[str, Interval]:
    """Average each query's score over the seeds (same test queries), then bootstrap the classes."""
    runs: list[QueryValues] = [load_query_values(directory) for directory in directories]
    first = runs[0]
    if any(not np.array_equal(run.rows, first.rows) for run in runs[1:]):
        return {}  # the seeds scored different queries: no common per-query average
    return {
        key: bootstrap_interval(np.mean([run.values[key] for run in runs], axis=0), first.labels)
        for key in INTERVAL_METRICS
    }


def _best_on_validation(summaries: Sequence[CellSummary]) -> CellSummary | None:
    scored = [s for s in summaries if s.validation]
    return max(scored, key=lambda s: statistics.mean(s.validation)) if scored else None


def _csv(summaries: Sequence[CellSummary]) -> str:
    keys = [key for key, _ in summaries[0].values]
    columns = [*keys, "seeds"]
    for metric in INTERVAL_METRICS:
        columns += [f"{metric}_mean", f"{metric}_sd", f"{metric}_ci_low", f"{metric}_ci_high"]
    columns += ["val_selection_mean", "selected_epoch_mean", "epochs", "seconds_mean"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for s in summaries:
        row: list[Any] = [value for _, value in s.values] + [" ".join(map(str, s.seeds))]
        for metric in INTERVAL_METRICS:
            scores = s.test(metric)
            interval = s.intervals.get(metric)
            row += [
                f"{statistics.mean(scores):.6f}",
                f"{statistics.stdev(scores) if len(scores) > 1 else 0.0:.6f}",
                f"{interval.low:.6f}" if interval else "",
                f"{interval.high:.6f}" if interval else "",
            ]
        row += [
            f"{statistics.mean(s.validation):.6f}" if s.validation else "",
            f"{statistics.mean(r.epoch for r in s.results):.2f}",
            max(s.epochs),
            f"{statistics.mean(s.seconds):.1f}",
        ]
        writer.writerow(row)
    return buffer.getvalue()


def _markdown(summaries: Sequence[CellSummary], select_on: str) -> str:
    keys = [key for key, _ in summaries[0].values]
    best = _best_on_validation(summaries)
    head = [
        *keys,
        "seeds",
        f"val {select_on} (selects)",
        "test Recall@1 mean ± sd",
        "Recall@1 95% CI",
        "test MAP@R mean ± sd",
        "MAP@R 95% CI",
        "selected epoch",
        "epochs",
        "seconds / seed",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        values = [f"**{value}**" if s is best else value for _, value in s.values]
        cells = [
            *values,
            str(len(s.seeds)),
            format_mean_sd(s.validation) if s.validation else "-",
            format_mean_sd(s.test("recall@1")),
            _interval_text(s, "recall@1"),
            format_mean_sd(s.test("map@r")),
            _interval_text(s, "map@r"),
            " / ".join(str(r.epoch) for r in s.results),
            str(max(s.epochs)),
            f"{statistics.mean(s.seconds):.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [
        "",
        "Test metrics of each run's checkpoint selected on validation; mean ± sample sd over seeds. "
        "95% CI: class bootstrap (1000 resamples of the test classes) of the per-query scores averaged "
        "over the seeds. " + (f"Bold: best cell on validation {select_on}." if best else "No validation split."),
        "",
        "Per run (95% class-bootstrap CI of that run alone):",
        "",
        "| " + " | ".join([*keys, "seed", "test Recall@1 [95% CI]", "test MAP@R [95% CI]"]) + " |",
        "|" + "---|" * (len(keys) + 3),
    ]
    for s in summaries:
        for seed, result in zip(s.seeds, s.results, strict=True):
            uncertainty = result.uncertainty
            per_run = [uncertainty.interval(key).format() if uncertainty else "-" for key in INTERVAL_METRICS]
            notes.append("| " + " | ".join([*(value for _, value in s.values), str(seed), *per_run]) + " |")
    return "\n".join(lines + notes) + "\n"


def _interval_text(summary: CellSummary, metric: str) -> str:
    interval = summary.intervals.get(metric)
    return f"[{interval.low:.4f}, {interval.high:.4f}]" if interval else "-"


def _plot(summaries: Sequence[CellSummary], path: Path) -> None:
    """Test Recall@1 and MAP@R (mean ± sd over seeds, seeds as dots, CI band) against each varied parameter.

    With several parameters, each panel draws one line per combination of the others.
    """
    keys = [key for key, _ in summaries[0].values]
    fig = Figure(figsize=(max(7, 5 * len(keys)), 7.5))
    axes = fig.subplots(2, len(keys), squeeze=False)
    for column, key in enumerate(keys):
        position = keys.index(key)
        others = sorted({tuple(v for i, v in enumerate(s.values) if i != position) for s in summaries})
        raw = [s.values[position][1] for s in summaries]
        numeric = _numeric(raw)
        order = sorted(set(raw), key=float) if numeric else list(dict.fromkeys(raw))
        for row, metric in enumerate(INTERVAL_METRICS):
            ax = axes[row, column]
            for other in others:
                group = [s for s in summaries if tuple(v for i, v in enumerate(s.values) if i != position) == other]
                group.sort(key=lambda s: order.index(s.values[position][1]))
                xs = [float(s.values[position][1]) if numeric else order.index(s.values[position][1]) for s in group]
                means = [statistics.mean(s.test(metric)) for s in group]
                sds = [statistics.stdev(s.test(metric)) if len(s.seeds) > 1 else 0.0 for s in group]
                label = ", ".join(f"{k}={v}" for k, v in other) or None
                line = ax.errorbar(xs, means, yerr=sds, marker="o", capsize=4, label=label)
                if all(metric in s.intervals for s in group):
                    lows = [s.intervals[metric].low for s in group]
                    highs = [s.intervals[metric].high for s in group]
                    ax.fill_between(xs, lows, highs, alpha=0.15, color=line[0].get_color(), linewidth=0)
                for x, s in zip(xs, group, strict=True):
                    ax.scatter([x] * len(s.seeds), s.test(metric), s=12, alpha=0.5, color=line[0].get_color())
            if numeric and _log_scale([float(value) for value in order]):
                ax.set_xscale("log", base=2)
            if numeric:
                ax.set_xticks([float(value) for value in order], order)
            else:
                ax.set_xticks(range(len(order)), order)
            ax.set(xlabel=key, ylabel=f"test {INTERVAL_METRICS[metric]}")
            ax.grid(alpha=0.3)
            if len(others) > 1:
                ax.legend(fontsize="small")
    fig.suptitle(
        "test metrics of the checkpoints selected on validation\n"
        "mean ± sd over seeds, dots: seeds, band: 95% class-bootstrap CI of the seed average",
        fontsize="medium",
    )
    save_figure(fig, path)


def _numeric(values: Sequence[str]) -> bool:
    try:
        [float(value) for value in values]
    except ValueError:
        return False
    return True


def _log_scale(values: Sequence[float]) -> bool:
    """Positive values spanning a factor of 8 or more read better on a log axis (e.g. 4, 8, 16, 32)."""
    return min(values) > 0 and max(values) / min(values) >= 8
