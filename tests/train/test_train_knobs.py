"""The engine's knobs: step schedule, gradient clipping, torch.compile, loader settings, slim best.pt, timings."""

from __future__ import annotations

import json
import re

import pytest
import torch

from retrieval.checkpoint import Checkpoint
from retrieval.config import load_config
from retrieval.errors import UserError
from retrieval.losses import AnchorLoss
from retrieval.train.schedule import LrSchedule, lr_factor
from retrieval.train.step import LossTracker
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_DIGITS
from tests.train.training import train

TINY = [*TINY_DIGITS, "data.batch_size=128"]


def _trainer(tmp_path, *overrides: str) -> Trainer:
    return Trainer.from_config(load_config(None, [*TINY, *overrides]), tmp_path / "run")


def _first_batch(trainer: Trainer) -> tuple[torch.Tensor, torch.Tensor]:
    trainer.begin_epoch(0)
    return next(iter(trainer.parts.loader))


def _grads(trainer: Trainer) -> list[torch.Tensor]:
    params = [*trainer.parts.model.parameters(), *trainer.parts.loss.parameters()]
    return [p.grad for p in params if p.grad is not None]


def test_constant_schedule_is_the_step_schedule_that_never_decays():
    steps, epochs = 10, 5
    constant = LrSchedule("constant", steps, epochs, warmup_epochs=1.5, frozen_epochs=1)
    never_decays = LrSchedule("step", steps, epochs, warmup_epochs=1.5, frozen_epochs=1, step_gamma=1.0)
    factors = [constant.factor(step) for step in range(steps * epochs)]
    assert factors == [never_decays.factor(step) for step in range(steps * epochs)]
    assert factors[:steps] == [1.0] * steps and factors[steps + 14 :] == [1.0] * (steps * epochs - steps - 14)
    assert factors[steps : steps + 15] == pytest.approx([(s + 1) / 15 for s in range(15)])


def test_step_schedule_follows_torch_step_lr_after_the_warm_up():
    steps, epochs, step_epochs, gamma = 10, 7, 2, 0.3
    schedule = LrSchedule("step", steps, epochs, warmup_epochs=1, step_epochs=step_epochs, step_gamma=gamma)
    factors = [schedule.factor(step) for step in range(steps * epochs)]
    assert factors[:steps] == pytest.approx([(s + 1) / steps for s in range(steps)])  # warm-up (epoch 0: no decay)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    reference = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_epochs, gamma=gamma)
    for epoch in range(epochs):
        if epoch > 0:
            assert factors[epoch * steps : (epoch + 1) * steps] == pytest.approx([reference.get_last_lr()[0]] * steps)
        optimizer.step()
        reference.step()


def test_cosine_schedule_is_warm_up_then_cosine_after_the_frozen_epochs():
    schedule = LrSchedule("cosine", 10, 5, warmup_epochs=0.5, frozen_epochs=1)
    assert [schedule.factor(s) for s in range(10)] == [1.0] * 10
    assert [schedule.factor(s) for s in range(10, 50)] == pytest.approx([lr_factor(s, 5, 40) for s in range(40)])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.schedule=linear", "train.schedule must be one of cosine, step"),
        ("train.step_epochs=0", "train.step_epochs must be an integer >= 1"),
        ("train.step_gamma=1.5", "train.step_gamma must be a factor in (0, 1]"),
        ("train.grad_clip=-1", "train.grad_clip must be null, 0 (off) or > 0"),
        ("train.compile=maybe", "train.compile must be bool"),
        ("data.pin_memory=2", "data.pin_memory must be bool"),
        ("data.persistent_workers=x", "data.persistent_workers must be bool"),
    ],
)
def test_engine_knobs_out_of_range_are_one_line_errors(override, message):
    with pytest.raises(UserError, match="^" + re.escape(message)) as info:
        load_config(None, [override])
    assert "\n" not in str(info.value)


def test_gradient_clipping_scales_the_gradient_to_the_max_norm(tmp_path):
    free, clipped = _trainer(tmp_path), _trainer(tmp_path, "train.grad_clip=0.01")
    batch = _first_batch(free)
    free.train_step(*batch, step=0)
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in _grads(free)]))
    assert norm > 0.01
    _first_batch(clipped)
    clipped.train_step(*batch, step=0)
    for raw, cut in zip(_grads(free), _grads(clipped), strict=True):
        torch.testing.assert_close(cut, raw * (0.01 / (norm + 1e-6)), rtol=1e-4, atol=1e-9)


def test_compile_runs_the_step_through_torch_compile(tmp_path, monkeypatch):
    compiled = []
    real_compile = torch.compile

    def eager_compile(module, **kwargs):  # dynamo traces the step; the eager backend skips code generation
        compiled.append(module)
        return real_compile(module, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    eager, traced = _trainer(tmp_path), _trainer(tmp_path, "train.compile=true")
    batch = _first_batch(eager)
    expected = eager.train_step(*batch, step=0)
    _first_batch(traced)
    torch.testing.assert_close(traced.train_step(*batch, step=0), expected)
    assert len(compiled) == 1


def test_persistent_workers_serve_training_and_every_evaluation(tmp_path):
    trainer = _trainer(
        tmp_path, "data.num_workers=1", "data.val_fraction=0.2", "data.pin_memory=true", "data.persistent_workers=true"
    )
    loaders = [trainer.parts.loader, *(evaluator.loader for evaluator in trainer.parts.evaluators.values())]
    assert all(loader.persistent_workers for loader in loaders)
    assert not any(loader.pin_memory for loader in loaders)  # pinned memory only helps copies to a GPU
    first, second = (
        trainer.parts.evaluators["val"](trainer.parts.model),
        trainer.parts.evaluators["val"](trainer.parts.model),
    )
    assert first == second
    off = _trainer(tmp_path, "data.num_workers=1")  # the default: exact resume (workers reseeded every epoch)
    assert not off.parts.loader.persistent_workers and not off.parts.evaluators["test"].loader.persistent_workers


@pytest.mark.slow
def test_best_holds_what_evaluation_needs_and_last_what_resume_needs(tmp_path, capsys):
    run = tmp_path / "run"
    train([*TINY, "train.epochs=1", "data.val_fraction=0.2"], run)
    best, last = Checkpoint.read(run / "checkpoints/best.pt"), Checkpoint.read(run / "checkpoints/last.pt")
    assert not best.resumable and best.proxies is not None
    assert last.resumable and last.proxies is not None
    assert (run / "checkpoints/best.pt").stat().st_size < 0.6 * (run / "checkpoints/last.pt").stat().st_size
    model = best.embedder()
    assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 16)

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = len(Trainer.from_config(load_config(None, [*TINY, "data.val_fraction=0.2"]), tmp_path / "x").parts.loader)
    for record in records:
        split = record["time"]
        assert set(split) == {"train", "eval", "write"} and min(split.values()) > 0
        assert sum(split.values()) <= record["seconds"] + 2e-3  # four figures each rounded to 1 ms
        assert record["images_per_second"] == pytest.approx(steps * 128 / split["train"], rel=0.01)
    # Resuming from best.pt is refused: test_a_best_pt_holds_no_optimizer_state_to_resume_from (test_resume.py).


def test_the_loss_tracker_reports_the_first_non_finite_step_and_the_mean():
    tracker = LossTracker(torch.device("cpu"))
    for value in (1.0, 3.0):
        tracker.add(torch.tensor(value))
    assert tracker.first_non_finite() is None and tracker.mean() == pytest.approx(2.0)
    for value in (float("inf"), 2.0, float("nan")):
        tracker.add(torch.tensor(value))
    assert tracker.first_non_finite() == (2, float("inf"))


def test_proxy_losses_check_labels_unless_the_trainer_checked_its_dataset(tmp_path):
    loss = AnchorLoss(num_classes=3, embedding_dim=4)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        loss(torch.randn(2, 4), torch.tensor([0, 3]))
    assert _trainer(tmp_path).parts.loss.check_labels is False
