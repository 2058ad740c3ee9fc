"""A pretraining run's `last.pt` is a `PretrainCheckpoint`: written and read back field by field."""

from __future__ import annotations

import pytest
import torch

from retrieval.errors import UserError
from retrieval.pretrain.pretrainer import PRETRAIN_FORMAT, PretrainCheckpoint


def _saved(tmp_path, **changes):
    state = PretrainCheckpoint(
        format=PRETRAIN_FORMAT,
        model={"w": torch.ones(2)},
        optimizer={"state": {}, "param_groups": []},
        epoch=3,
        config={"train": {"seed": 0}},
        source={"images": "/data/unlabeled"},
    )
    path = tmp_path / "last.pt"
    state.save(path)
    if changes:
        raw = torch.load(path, weights_only=True)
        torch.save({**raw, **changes}, path)
    return path


def test_a_saved_checkpoint_reads_back(tmp_path):
    loaded = PretrainCheckpoint.read(_saved(tmp_path))
    assert loaded.epoch == 3 and torch.equal(loaded.model["w"], torch.ones(2)) and loaded.grad_scaler is None
    assert set(torch.load(tmp_path / "last.pt", weights_only=True)) == {
        "format", "model", "optimizer", "grad_scaler", "epoch", "config", "source"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epoch": "3"}, r"last\.pt\.epoch must be int, got '3'"),
        ({"epoch": -1}, r"last\.pt\.epoch must be an integer >= 0, got -1"),
        ({"source": {"images": 7}}, r"last\.pt\.source must be "),
        ({"format": "other"}, r"last\.pt is not a `retrieval pretrain` checkpoint"),
    ],
    ids=["type", "range", "source", "format"],
)
def test_a_hand_edited_checkpoint_is_one_line_naming_the_file_and_the_field(tmp_path, changes, message):
    with pytest.raises(UserError, match=message) as error:
        PretrainCheckpoint.read(_saved(tmp_path, **changes))
    assert "\n" not in str(error.value)


def test_a_missing_field_is_named(tmp_path):
    path = _saved(tmp_path)
    raw = torch.load(path, weights_only=True)
    del raw["optimizer"]
    torch.save(raw, path)
    with pytest.raises(UserError, match=r"last\.pt\.optimizer is missing; restore an intact copy"):
        PretrainCheckpoint.read(path)
