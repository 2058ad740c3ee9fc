"""`retrieval sweep`, `retrieval compare` and the per-query files behind them, through the command line."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.evaluate.uncertainty import QueryValues, load_query_values, save_query_values
from retrieval.metrics import paired_difference
from tests.conftest import TINY_BACKBONE

CLASSES = np.repeat(np.arange(12), 5)
FINAL_LINES = re.compile("".join(rf"Recall@{k}: \d\.\d{{4}}\n" for k in (1, 2, 4, 8)) + r"MAP@R: \d\.\d{4}\n$")
# A tiny digits run: `TINY_BACKBONE` at 16 px, one epoch; the demo's validation split selects best.pt.
TINY = [
    f"model.backbone={TINY_BACKBONE}",
    "model.embedding_dim=8",
    "data.image_size=16",
    "train.epochs=1",
    "train.threads=1",
    "train.plots=false",
]


def query_values(seed: int, rows: np.ndarray | None = None) -> QueryValues:
    rng = np.random.default_rng(seed)
    hits = (rng.uniform(size=CLASSES.size) < 0.6).astype(float)
    rows = np.arange(CLASSES.size) if rows is None else rows
    return QueryValues(rows, CLASSES, {"recall@1": hits, "map@r": hits * rng.uniform(size=CLASSES.size)})


def test_compare_prints_the_paired_difference_with_its_interval(tmp_path: Path, capsys) -> None:
    a, b = query_values(0), query_values(1)
    save_query_values(tmp_path / "a.npz", a)
    (tmp_path / "run_b").mkdir()
    save_query_values(tmp_path / "run_b" / "per_query.npz", b)
    out_json = tmp_path / "compare.json"
    assert main(["compare", str(tmp_path / "a.npz"), str(tmp_path / "run_b"), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    expected = paired_difference(a.values["map@r"], b.values["map@r"], CLASSES)
    assert f"MAP@R: {expected.estimate:+.4f} [{expected.low:+.4f}, {expected.high:+.4f}]" in out
    assert "paired on the same 60 queries" in out and "1000 resamples of 12 classes" in out
    assert json.loads(out_json.read_text())["difference"]["map@r"] == pytest.approx(list(expected))


def test_compare_refuses_different_queries_and_missing_files(tmp_path: Path, capsys) -> None:
    save_query_values(tmp_path / "a.npz", query_values(0))
    save_query_values(tmp_path / "b.npz", query_values(1, rows=np.arange(CLASSES.size) + 1))
    assert main(["compare", str(tmp_path / "a.npz"), str(tmp_path / "b.npz")]) == 2
    assert capsys.readouterr().err.startswith("error: the two runs scored different queries")
    assert main(["compare", str(tmp_path / "a.npz"), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no per-query scores at")


def sweep_command(output_dir: Path) -> list[str]:
    command = ["sweep", "--grid", "loss.gamma=8,16", "--seeds", "0", "--output-dir", str(output_dir)]
    return command + [argument for override in TINY for argument in ("--set", override)]


@pytest.mark.slow
def test_sweep_killed_midway_restarts_and_skips_finished_cells(tmp_path: Path, capsys) -> None:
    """Kill the whole sweep (SIGKILL) once its first cell finished; the rerun trains only the rest."""
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    process = subprocess.Popen(
        [sys.executable, "-m", "retrieval.cli.main", *sweep_command(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    first, second = out / "loss.gamma=8" / "seed-0", out / "loss.gamma=16" / "seed-0"
    try:
        deadline = time.monotonic() + 300
        while not (first / "result.json").is_file():
            assert process.poll() is None and time.monotonic() < deadline, "the first cell did not finish"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not (out / "sweep.csv").exists() and not (second / "result.json").exists()
    finished_at = (first / "result.json").stat().st_mtime_ns

    assert main(sweep_command(out)) == 0
    printed = capsys.readouterr().out
    assert "1 of 2 cells already finished (result.json found), skipped" in printed
    assert "[1/1] loss.gamma=16 seed 0: test Recall@1" in printed
    assert (first / "result.json").stat().st_mtime_ns == finished_at  # not retrained
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [row["loss.gamma"] for row in rows] == ["8", "16"]

    # Every run keeps its per-query scores and intervals; its closing lines are still the last lines.
    log = (second / "train.log").read_text()
    assert FINAL_LINES.search(log) and "95% CI (class bootstrap, 1000 resamples of 10 classes): Recall@1" in log
    result = json.loads((second / "result.json").read_text())
    estimate, low, high = result["uncertainty"]["map@r"]
    assert estimate == pytest.approx(result["test"]["map@r"]) and low <= estimate <= high
    # `evaluate --per-query` of the selected checkpoint reproduces the run's per-query file.
    evaluated = tmp_path / "evaluated.npz"
    assert (
        main(["evaluate", "--checkpoint", str(second / "checkpoints" / "best.pt"), "--per-query", str(evaluated)]) == 0
    )
    assert FINAL_LINES.search(capsys.readouterr().out)
    ours, theirs = load_query_values(evaluated), load_query_values(second)
    np.testing.assert_array_equal(ours.rows, theirs.rows)
    np.testing.assert_allclose(ours.values["map@r"], theirs.values["map@r"], atol=1e-6)
    assert main(["compare", str(first), str(second)]) == 0
    assert "A - B, paired on the same" in capsys.readouterr().out
