"""Gradient accumulation: N micro-batches make one optimizer step, equal to one big batch for proxy losses."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from retrieval.config import load_config
from retrieval.train.accumulation import optimizer_steps, plan_micro_batches
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_DIGITS

TINY = [*TINY_DIGITS, "data.val_fraction=0"]


@pytest.fixture
def data(csv_dataset_factory, tmp_path) -> list[str]:
    """32 training images of 4 classes."""
    return ["data.name=csv", f"data.path={csv_dataset_factory(tmp_path / 'data', per_class=8)}"]


def _trainer(tmp_path, *overrides: str) -> Trainer:
    return Trainer.from_config(load_config(None, [*TINY, *overrides]), tmp_path / "run")


def test_the_plan_groups_micro_batches_and_steps_a_shorter_trailing_group():
    plan = plan_micro_batches(7, 3)
    assert [step for step, _ in plan] == [0, 0, 0, 1, 1, 1, 2]
    assert [(m.first, m.last) for _, m in plan] == [(1, 0), (0, 0), (0, 1), (1, 0), (0, 0), (0, 1), (1, 1)]
    assert [m.weight for _, m in plan] == pytest.approx([1 / 3] * 6 + [1.0])  # the trailing step: its own mean
    assert optimizer_steps(7, 3) == 3 and optimizer_steps(6, 3) == 2
    assert [m.weight for _, m in plan_micro_batches(4, 1)] == [1.0] * 4  # no accumulation: every batch a step


def test_four_micro_batches_of_8_give_the_gradient_of_one_batch_of_32_for_proxy_nca(data, tmp_path):
    # BatchNorm frozen (eval statistics): in train mode it normalizes each micro-batch by its own statistics.
    common = [*data, "loss.name=proxy_nca", "train.freeze_bn=true", "train.freeze_backbone_epochs=0"]
    with pytest.warns(UserWarning, match="freeze_bn"):
        big = _trainer(tmp_path, *common, "data.batch_size=32")
        small = _trainer(tmp_path, *common, "data.batch_size=8", "train.accumulate_steps=4")
    big.begin_epoch(0)
    small.begin_epoch(0)
    images, labels = next(iter(big.parts.loader))
    assert len(images) == 32
    big.train_step(images, labels, step=0)
    for index, (step, micro) in enumerate(plan_micro_batches(4, 4)):
        part = slice(8 * index, 8 * (index + 1))
        small.train_step(images[part], labels[part], step, micro)
    named = [("model", big.parts.model, small.parts.model), ("loss", big.parts.loss, small.parts.loss)]
    for prefix, one, accumulated in named:
        for (name, a), b in zip(one.named_parameters(), accumulated.parameters(), strict=True):
            assert (a.grad is None) == (b.grad is None) == (not a.requires_grad), name  # frozen BatchNorm: no grad
            if a.grad is not None:
                torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=f"{prefix}.{name}")


def test_an_epoch_steps_the_optimizer_the_schedule_and_the_average_once_per_group(data, tmp_path, monkeypatch):
    trainer = _trainer(
        tmp_path, *data, "data.batch_size=4", "train.accumulate_steps=3", "train.ema=0.9", "train.epochs=2"
    )
    batches = len(trainer.parts.loader)
    steps = math.ceil(batches / 3)
    assert batches % 3 and trainer.parts.schedule.total_steps == 2 * steps  # the schedule counts optimizer steps
    applied, averaged, lrs = [], [], []
    apply, update = trainer.parts.step.apply, trainer.ema.update
    monkeypatch.setattr(trainer.parts.step, "apply", lambda: (applied.append(1), apply())[1])
    monkeypatch.setattr(trainer.ema, "update", lambda step: (averaged.append(step), update(step))[1])
    monkeypatch.setattr(trainer, "_set_lr", lambda step: lrs.append(step))
    _, images = trainer._train_epoch(1)
    assert len(applied) == steps and averaged == [steps + s + 1 for s in range(steps)]
    assert lrs == [steps + s for s in range(steps)]  # global steps of epoch 2, set once per group
    assert batches == 8 and images == 32


def test_a_pair_loss_with_accumulation_warns_once_that_pairs_stay_in_their_micro_batch(data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="retrieval.train.builders"):
        _trainer(tmp_path, *data, "loss.name=circle", "data.p=2", "data.k=4", "train.accumulate_steps=2")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pairs never cross micro-batches" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="retrieval.train.builders"):
        _trainer(tmp_path, *data, "loss.name=proxy_nca", "train.accumulate_steps=2")
    assert not caplog.records
