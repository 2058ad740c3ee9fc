"""The evaluation of `retrieval evaluate` on closed-set data: per-group lines, calibration, classification and grid.

The command's refusals and its re-ranking line are `tests/cli/test_evaluate_cli.py`'s."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from tests.evaluate.checkpoints import write_digits_checkpoint


@pytest.fixture(scope="module")
def proxy_checkpoint(tmp_path_factory):
    return write_digits_checkpoint(tmp_path_factory.mktemp("checkpoint") / "best.pt", "anchor")


@pytest.mark.slow
def test_evaluate_reports_groups_calibration_classification_and_grid(proxy_checkpoint, tmp_path):
    """As a library call: `retrieval evaluate` prints `report.text()` and writes `report.record()` as `--json`
    (`tests/cli/test_evaluate_cli.py` checks that the command prints the same)."""
    out, grid = tmp_path / "classification", tmp_path / "grid.png"
    request = EvaluationRequest(proxy_checkpoint, calibrate=True, classification=out, grid=grid, grid_rows=3)
    report = run_evaluation(request)
    lines = report.text().splitlines()
    assert lines[-5].startswith("Recall@1: ") and lines[-1].startswith("MAP@R: ")  # the closing lines stay last
    assert lines[0].startswith("by training frequency (head / mid / tail): Recall@1 ")
    metrics = json.loads(report.record().json_text())
    calibration = metrics["calibration"]
    assert calibration["temperature"] > 0 and calibration["num_calibration_images"] == 179
    assert calibration["after"]["accuracy"] == calibration["before"]["accuracy"]
    assert f"test ECE {calibration['before']['ece']:.4f} -> {calibration['after']['ece']:.4f}" in lines[1]
    for name in ("head", "mid", "tail"):
        assert 0 <= metrics[f"{name}/recall@1"] <= 1 and 0 <= metrics[f"{name}/proxy_accuracy"] <= 1
    written = json.loads((out / "classification.json").read_text())
    assert written["accuracy"] == pytest.approx(metrics["proxy_accuracy"])  # two paths to the same argmax
    assert np.asarray(written["confusion"]).sum() == written["num_images"] == 899
    assert written["calibrated"]["ece"] == pytest.approx(calibration["after"]["ece"])
    for name in ("pr_curves.png", "confusion.png", "reliability.png"):
        assert (out / name).stat().st_size > 10_000, name
    with Image.open(grid) as image:
        assert image.size[1] > 3 * 100
