"""A resume (`retrieval train --resume`, through the library) continues a PML loss exactly: a first-class entry with
class centres and a `pml.` adapter with a softmax weight end where an uninterrupted run ends (weights, loss
parameters, results)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import TINY_DIGITS
from tests.train.training import train, train_interrupted

pytestmark = pytest.mark.slow

TINY = [*TINY_DIGITS, "train.epochs=2"]


@pytest.mark.slow
@pytest.mark.parametrize("loss", [["loss.name=soft_triple"], ["loss.name=pml.NormalizedSoftmaxLoss"]], ids=str)
def test_a_resumed_pml_loss_ends_where_an_uninterrupted_run_ends(loss, csv_dataset, tmp_path, monkeypatch) -> None:
    # 16 training images, half of each class validating: the resume's exactness does not need the digits' 1,437.
    data = ["data.name=csv", f"data.path={csv_dataset}", "data.val_fraction=0.5", "data.batch_size=4"]
    overrides = [*TINY, *data, *loss]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    train(overrides, straight)
    train_interrupted(monkeypatch, 1, overrides, interrupted)
    train(resume=interrupted)

    a = torch.load(straight / "checkpoints/last.pt", weights_only=True)
    b = torch.load(interrupted / "checkpoints/last.pt", weights_only=True)
    assert a["epoch"] == b["epoch"] == 1 and a["loss"]  # the loss's own parameters are in the checkpoint
    for part in ("model", "loss"):
        for name, tensor in a[part].items():
            torch.testing.assert_close(b[part][name], tensor, rtol=0, atol=0, msg=f"{part}.{name}")
    assert json.loads((interrupted / "result.json").read_text()) == json.loads((straight / "result.json").read_text())
    assert [json.loads(line)["epoch"] for line in (interrupted / "metrics.jsonl").read_text().splitlines()] == [1, 2]
