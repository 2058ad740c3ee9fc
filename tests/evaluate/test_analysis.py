"""`retrieval evaluate` on closed-set data: per-group lines, --calibrate, --classification and --grid."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.cli.main import main
from retrieval.config import Config, ModelConfig, config_to_dict
from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from retrieval.losses import build_loss
from retrieval.models import Embedder


def _digits_checkpoint(path, loss_name: str):
    """A digits checkpoint of an untrained resnet10t (16 px, 16-d) and its loss's state: fast to evaluate."""
    torch.manual_seed(0)
    model_config = ModelConfig(backbone="resnet10t", embedding_dim=16, pretrained=False)
    config = Config(model=model_config)
    config.data.name, config.data.image_size, config.data.val_fraction = "digits", 16, 0.2
    config.data.num_workers = 0
    config.loss.name, config.train.device = loss_name, "cpu"
    model = Embedder(**model_config.model_dump())
    loss = build_loss(loss_name, {}, 10, 16)
    Checkpoint(model.state_dict(), model_config, config_to_dict(config), 10, loss=loss.state_dict()).save(path)
    return path


@pytest.fixture(scope="module")
def proxy_checkpoint(tmp_path_factory):
    return _digits_checkpoint(tmp_path_factory.mktemp("checkpoint") / "best.pt", "anchor")


@pytest.mark.slow
def test_evaluate_reports_groups_calibration_classification_and_grid(proxy_checkpoint, tmp_path):
    """As a library call: `retrieval evaluate` prints `report.text()` and writes `report.record()` as `--json`
    (`tests/evaluate/test_run.py` checks that the command prints the same)."""
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


def test_calibrate_without_a_validation_split_says_how_to_add_one(proxy_checkpoint, capsys):
    args = ["evaluate", "--checkpoint", str(proxy_checkpoint), "--calibrate", "--set", "data.val_fraction=0"]
    assert main(args) == 2
    assert "set data.val_fraction" in capsys.readouterr().err


def test_classification_needs_proxies(tmp_path, capsys):
    checkpoint = _digits_checkpoint(tmp_path / "triplet.pt", "triplet")
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--classification", str(tmp_path / "out")]) == 2
    assert "needs a checkpoint trained with a proxy loss" in capsys.readouterr().err


def test_rerank_parameters_are_chosen_on_validation_and_recorded(proxy_checkpoint, tmp_path, capsys):
    checkpoint = proxy_checkpoint
    result = tmp_path / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--rerank", "qe", "--json", str(result)]) == 0
    out = capsys.readouterr().out
    chosen = json.loads(result.read_text())["rerank"]
    assert chosen["chosen_on"] == "validation" and chosen["spec"].startswith("qe:k=")
    assert f"re-ranking: {chosen['spec']} (chosen on validation: MAP@R {chosen['validation']['map@r']:.4f}" in out
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--rerank", "mqe"]) == 2
    assert "unknown re-ranking method 'mqe'" in capsys.readouterr().err
