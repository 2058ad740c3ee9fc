"""Sweep reports from finished run directories: statistics against plain python, CIs, best on validation."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from retrieval.evaluate.uncertainty import QueryValues, save_query_values, uncertainty_summary
from retrieval.metrics import bootstrap_interval
from retrieval.sweep import parse_grid, plan_cells, summarize, write_reports

CLASSES = np.repeat(np.arange(15), 4)


def finish_run(directory: Path, seed: int, quality: float, epochs: int = 3) -> QueryValues:
    """A run directory as `retrieval train` leaves it: per_query.npz, result.json, metrics.jsonl."""
    rng = np.random.default_rng(seed + int(quality * 1000))
    hits = (rng.uniform(size=len(CLASSES)) < quality).astype(float)
    values = QueryValues(
        np.arange(len(CLASSES)), CLASSES, {"recall@1": hits, "map@r": hits * rng.uniform(size=hits.size)}
    )
    directory.mkdir(parents=True, exist_ok=True)
    save_query_values(directory / "per_query.npz", values)
    test = {key: float(value.mean()) for key, value in values.values.items()}
    result = {"epoch": 2, "selected_on": "val", "test": test, "selection_value": quality + 0.01 * seed}
    result["uncertainty"] = uncertainty_summary(values).as_dict()
    (directory / "result.json").write_text(json.dumps(result))
    records = [{"epoch": e + 1, "loss": 1.0, "lr": 1e-3, "seconds": 2.5 + e} for e in range(epochs)]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return values


def test_reports_summarize_finished_seeds(tmp_path: Path) -> None:
    cells = plan_cells(None, [], parse_grid(["loss.gamma=4,8,16"]), [0, 1, 2], tmp_path)
    written = {}
    for cell in cells:
        gamma = float(dict(cell.values)["loss.gamma"])
        if (gamma, cell.seed) != (16.0, 2):  # one run unfinished
            written[cell.directory] = finish_run(cell.directory, cell.seed, quality=0.2 + gamma / 40)
    summaries = summarize(cells)
    assert [s.seeds for s in summaries] == [[0, 1, 2], [0, 1, 2], [0, 1]]
    paths = write_reports(summaries, tmp_path, "map@r")
    assert [p.name for p in paths] == ["sweep.csv", "sweep.md", "sweep.png"] and paths[2].stat().st_size > 10_000

    rows = list(csv.DictReader(paths[0].open()))
    assert [row["loss.gamma"] for row in rows] == ["4", "8", "16"]
    for row, summary in zip(rows, summaries, strict=True):
        runs = [written[cell.directory] for cell in cells if cell.values == summary.values and cell.is_finished]
        recalls = [run.values["recall@1"].mean() for run in runs]
        assert float(row["recall@1_mean"]) == pytest.approx(statistics.mean(recalls), abs=1e-6)
        assert float(row["recall@1_sd"]) == pytest.approx(statistics.stdev(recalls), abs=1e-6)
        pooled = bootstrap_interval(np.mean([run.values["map@r"] for run in runs], axis=0), CLASSES)
        assert (float(row["map@r_ci_low"]), float(row["map@r_ci_high"])) == pytest.approx(pooled[1:], abs=1e-6)
        assert float(row["seconds_mean"]) == pytest.approx(2.5 + 3.5 + 4.5, abs=0.05)
        assert row["epochs"] == "3"

    markdown = paths[1].read_text()
    best = max(summaries, key=lambda s: statistics.mean(s.validation))
    assert f"| **{dict(best.values)['loss.gamma']}** |" in markdown
    assert markdown.count("**") == 2  # exactly one cell marked
    assert (
        len([line for line in markdown.splitlines() if line.startswith(("| 16 |", "| **16** |"))]) == 3
    )  # cell + 2 runs
