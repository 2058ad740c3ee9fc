"""The epoch loop that training, pretraining and the re-ranker share: seeding for an exact resume, and the stop at the
first non-finite loss, read back every `CHECK_EVERY` steps and after the last."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from retrieval.errors import UserError
from retrieval.train.epoch_loop import CHECK_EVERY, epoch_batches, seed_epoch
from retrieval.train.step import LossTracker


def _losses(values: list[float]) -> DataLoader:
    return DataLoader(TensorDataset(torch.tensor(values)), batch_size=1)


def test_a_non_finite_loss_stops_the_loop_at_the_next_read_back_naming_its_epoch_and_step():
    values = [1.0] * (CHECK_EVERY + 10)
    values[6] = float("nan")
    tracker, seen = LossTracker(torch.device("cpu")), []
    with pytest.raises(UserError) as error:
        for index, (loss,) in epoch_batches(_losses(values), tracker, 2, 5, "lower train.lr", shown=False):
            tracker.add(loss[0])
            seen.append(index)
    assert str(error.value) == "the loss became nan at epoch 3, step 7; lower train.lr"
    assert seen == list(range(CHECK_EVERY))  # one read-back every CHECK_EVERY steps, not one a step


def test_the_last_step_is_checked_too_and_finite_losses_pass():
    tracker = LossTracker(torch.device("cpu"))
    for _, (loss,) in epoch_batches(_losses([1.0, 2.0, 3.0]), tracker, 0, 1, "", shown=False):
        tracker.add(loss[0])
    assert tracker.mean() == 2.0
    tracker = LossTracker(torch.device("cpu"))
    with pytest.raises(UserError, match=r"became inf at epoch 1, step 3"):
        for _, (loss,) in epoch_batches(_losses([1.0, 2.0, float("inf")]), tracker, 0, 1, "", shown=False):
            tracker.add(loss[0])


def test_under_loss_scaling_a_skipped_step_is_no_error():
    tracker = LossTracker(torch.device("cpu"), skip_non_finite=True)
    for _, (loss,) in epoch_batches(_losses([1.0, float("inf"), 3.0]), tracker, 0, 1, "", shown=False):
        tracker.add(loss[0])
    assert tracker.mean() == 2.0


def test_an_epochs_order_and_draws_depend_only_on_seed_and_epoch():
    loader = DataLoader(TensorDataset(torch.arange(20)), batch_size=5, shuffle=True, generator=torch.Generator())

    def epoch(number: int) -> tuple[list[int], float]:
        seed_epoch(loader, 7, number)
        return [int(x) for (batch,) in loader for x in batch], float(torch.rand(()))

    first, second = epoch(0), epoch(1)
    assert first != second
    assert epoch(1) == second and epoch(0) == first  # in any order: a resume at epoch 1 draws what a run would
