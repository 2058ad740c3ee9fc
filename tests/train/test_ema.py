"""train.ema: a weight average scored beside the raw weights, the better one selected and recorded, resumed exactly."""

from __future__ import annotations

import json

import pytest
import torch

from retrieval.checkpoint import Checkpoint
from retrieval.config import load_config
from retrieval.core.epoch_record import EpochRecord
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_DIGITS
from tests.train.training import train, train_interrupted

pytestmark = pytest.mark.slow

TINY = [*TINY_DIGITS, "data.batch_size=4"]


@pytest.fixture
def tiny(csv_dataset) -> list[str]:
    """16 training images, half of each class validating: a few seconds an epoch."""
    return [*TINY, "data.name=csv", f"data.path={csv_dataset}", "data.val_fraction=0.5"]


def _records(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _favour(monkeypatch, weights: str) -> None:
    """Add 1 to every score of the `raw` or `ema` weights, so the selection picks them whatever they learned."""
    original = Trainer._score

    def scored(self, split, model, proxies):
        bonus = float((model is self.ema.model) == (weights == "ema"))
        return {key: value + bonus for key, value in original(self, split, model, proxies).items()}

    monkeypatch.setattr(Trainer, "_score", scored)


def _scored(scores: dict[str, float]) -> EpochRecord:
    """An evaluated epoch's record with `scores`, as the trainer hands it to `_select`."""
    return EpochRecord(epoch=1, loss=1.0, lr=0.1).with_scores(scores)


def test_selection_takes_the_better_of_raw_and_average_and_records_which(tiny, tmp_path):
    trainer = Trainer.from_config(load_config(None, [*tiny, "train.ema=0.9"]), tmp_path / "run")
    ema = _scored({"val/map@r": 0.5, "ema/val/map@r": 0.6})
    assert trainer._select(0, ema) and ema.better_weights == "ema"
    assert (trainer.best_epoch, trainer.best_score, trainer.selected_weights) == (1, 0.6, "ema")
    raw = _scored({"val/map@r": 0.7, "ema/val/map@r": 0.65})
    assert trainer._select(1, raw) and raw.better_weights == "raw"
    assert (trainer.best_epoch, trainer.selected_weights) == (2, "raw")
    worse = _scored({"val/map@r": 0.2, "ema/val/map@r": 0.69})
    assert not trainer._select(2, worse) and worse.better_weights == "ema"
    tie = _scored({"val/map@r": 0.8, "ema/val/map@r": 0.8})
    assert trainer._select(3, tie) and trainer.selected_weights == "raw"  # ties keep the raw weights


def test_the_average_differs_from_the_raw_weights_and_best_pt_holds_the_selected_one(
    tiny, tmp_path, monkeypatch, capsys
):
    _favour(monkeypatch, "ema")
    run = tmp_path / "run"
    _, said = train([*tiny, "train.epochs=1", "train.ema=0.5"], run)
    out = capsys.readouterr().out + said  # the epoch lines, then the closing lines
    assert "ema val R@1" in out and "(EMA weights)" in out
    (record,) = _records(run)
    assert record["better_weights"] == "ema" and record["ema/val/map@r"] >= 1.0
    result = json.loads((run / "result.json").read_text())
    assert result["selected_weights"] == "ema" and result["selection_value"] == record["ema/val/map@r"]

    last, best = Checkpoint.read(run / "checkpoints/last.pt"), Checkpoint.read(run / "checkpoints/best.pt")
    assert last.ema is not None and best.ema is None and best.selected_weights == last.selected_weights == "ema"
    averaged = {name: last.ema[f"model.{name}"] for name in last.model}
    assert any(not torch.equal(averaged[name], last.model[name]) for name in last.model if "weight" in name)
    for name, value in best.model.items():
        torch.testing.assert_close(value, averaged[name], rtol=0, atol=0, msg=name)
    torch.testing.assert_close(best.loss["proxies"], last.ema["loss.proxies"], rtol=0, atol=0)


def test_without_validation_the_result_is_the_last_epochs_average(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    _, said = train([*tiny, "train.epochs=1", "train.ema=0.5", "data.val_fraction=0"], run)
    assert "nothing was selected (EMA weights)" in said
    last, best = Checkpoint.read(run / "checkpoints/last.pt"), Checkpoint.read(run / "checkpoints/best.pt")
    assert best.selected_weights == "ema"
    for name, value in best.model.items():
        torch.testing.assert_close(value, last.ema[f"model.{name}"], rtol=0, atol=0, msg=name)


def test_a_resumed_run_with_ema_equals_an_uninterrupted_one(tiny, tmp_path, monkeypatch):
    _favour(monkeypatch, "ema")  # the selection so far then lives in best.pt, not in last.pt's raw weights
    overrides = [*tiny, "train.epochs=2", "train.ema=0.8"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    train(overrides, straight)
    train_interrupted(monkeypatch, 1, overrides, interrupted)
    train(resume=interrupted)

    a = torch.load(straight / "checkpoints/last.pt", weights_only=True)
    b = torch.load(interrupted / "checkpoints/last.pt", weights_only=True)
    assert a["epoch"] == b["epoch"] == 1 and a["selected_weights"] == b["selected_weights"]
    for part in ("model", "loss", "ema"):
        for name, tensor in a[part].items():
            torch.testing.assert_close(b[part][name], tensor, rtol=0, atol=0, msg=f"{part}.{name}")
    assert (interrupted / "result.json").read_text() == (straight / "result.json").read_text()
    assert json.loads((straight / "result.json").read_text())["selected_weights"] == "ema"
