"""train.amp=fp16: float16 autocast with torch's GradScaler; an overflowing step is skipped, not a failed run."""

from __future__ import annotations

import json
import math

import pytest
import torch

from retrieval.checkpoint import Checkpoint
from retrieval.config import load_config
from retrieval.errors import UserError
from retrieval.losses import MetricLoss
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_DIGITS
from tests.train.training import train

pytestmark = pytest.mark.slow

TINY = [*TINY_DIGITS, "data.val_fraction=0"]


@pytest.fixture
def tiny(csv_dataset) -> list[str]:
    """16 training images in 4 steps of 4: fp16 autocast is slow on the CPU."""
    return [*TINY, "data.name=csv", f"data.path={csv_dataset}", "data.batch_size=4"]


def _parameters(trainer: Trainer) -> dict[str, torch.Tensor]:
    parts = trainer.parts  # parameters only: BatchNorm's running statistics move in every forward pass
    return {name: p.detach().clone() for name, p in [*parts.model.named_parameters(), *parts.loss.named_parameters()]}


def _inject_inf_once(parameter: torch.nn.Parameter) -> None:
    """The next backward writes inf into `parameter`'s gradient, once: an fp16 overflow."""
    calls = []

    def hook(grad: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return grad * float("inf") if len(calls) == 1 else grad

    parameter.register_hook(hook)


def test_an_overflowing_step_is_skipped_lowers_the_scale_and_the_next_step_trains(tiny, tmp_path):
    trainer = Trainer.from_config(load_config(None, [*tiny, "train.amp=fp16"]), tmp_path / "run")
    step, optimizer = trainer.parts.step, trainer.parts.optimizer
    assert step.scaler is not None and step.scaler.get_scale() == 65536.0  # torch's default start
    step.scaler = torch.amp.GradScaler("cpu", init_scale=256.0)  # low enough that only the injected inf overflows
    trainer.begin_epoch(0)
    images, labels = next(iter(trainer.parts.loader))
    before = _parameters(trainer)
    _inject_inf_once(trainer.parts.model.head.weight)

    loss = trainer.train_step(images, labels, step=0)
    assert torch.isfinite(loss)  # the loss was fine: only a gradient overflowed
    for name, value in _parameters(trainer).items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)  # weights unchanged
    assert not optimizer.state  # AdamW never stepped
    assert step.scaler.get_scale() == 128.0 and int(step.skipped_steps) == 1

    trainer.train_step(images, labels, step=1)
    assert not torch.equal(trainer.parts.model.head.weight, before["head.weight"])
    assert step.scaler.get_scale() == 128.0 and int(step.skipped_steps) == 1


def test_a_cpu_fp16_run_skips_a_non_finite_loss_records_it_and_resumes_the_scale(tiny, tmp_path, monkeypatch, capsys):
    calls = []
    original = MetricLoss.__call__

    def first_loss_infinite(self, *args, **kwargs):  # a non-finite loss: the scaler skips that step
        calls.append(1)
        loss = original(self, *args, **kwargs)
        return loss * float("inf") if len(calls) == 1 else loss

    monkeypatch.setattr(MetricLoss, "__call__", first_loss_infinite)
    run = tmp_path / "run"
    train([*tiny, "data.batch_size=2", "train.amp=fp16", "train.epochs=1"], run)  # not a failed run
    (record,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    skipped = record["skipped_steps"]  # the injected one, and any the starting scale of 65536 overflowed
    assert 1 <= skipped < 8 and record["loss_scale"] == 65536.0 / 2**skipped and math.isfinite(record["loss"])
    assert f"fp16 skipped {skipped} (scale {65536 // 2**skipped})" in capsys.readouterr().out
    last = Checkpoint.read(run / "checkpoints" / "last.pt")
    assert last.grad_scaler is not None and last.grad_scaler["scale"] == record["loss_scale"]
    assert Checkpoint.read(run / "checkpoints" / "best.pt").grad_scaler is None

    resumed = Trainer.from_config(last.config(overrides=["train.epochs=2"]), run, resuming=True)
    resumed.resume(last, Checkpoint.read(run / "checkpoints" / "best.pt"))
    assert resumed.parts.step.scaler is not None and resumed.parts.step.scaler.get_scale() == record["loss_scale"]


def test_only_an_epoch_that_overflowed_at_every_step_below_scale_1_stops_the_run(tiny, tmp_path):
    trainer = Trainer.from_config(load_config(None, [*tiny, "train.amp=fp16"]), tmp_path / "run")
    trainer._check_scaled_steps(skipped=4, scale=4096.0, steps=4, epoch=0)  # finding its scale
    trainer._check_scaled_steps(skipped=3, scale=0.5, steps=4, epoch=0)  # one step trained
    with pytest.raises(UserError, match=r"^train.amp=fp16: every one of the 4 steps of epoch 3 had inf or NaN") as info:
        trainer._check_scaled_steps(skipped=4, scale=0.25, steps=4, epoch=2)
    assert "\n" not in str(info.value) and "lower train.lr" in str(info.value)
