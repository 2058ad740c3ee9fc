"""Training with a cross-batch memory and without a head: the queue fills, lands in last.pt, and the run ends."""

from __future__ import annotations

import pytest

from retrieval.checkpoint import Checkpoint
from retrieval.losses import CircleLoss, CrossBatchMemory
from tests.train.training import train

pytestmark = pytest.mark.slow

SETTINGS = [
    "model.backbone=resnet10t",
    "model.embedding_dim=null",  # the backbone's 512 pooled features: the memory is built with the model's width
    "data.image_size=16",
    "data.val_fraction=0",
    "train.plots=false",
    "loss.name=circle",
    "loss.gamma=80",
    "loss.memory_size=64",
    "data.p=4",
    "data.k=4",
    "train.epochs=1",
    "train.threads=1",
]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:train.freeze_bn is set but the backbone starts from scratch")
def test_a_run_with_memory_and_no_head_saves_the_queue(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    _, said = train(SETTINGS, run)
    assert said.strip().splitlines()[-1].startswith("MAP@R: ")

    checkpoint = Checkpoint.read(run / "checkpoints" / "last.pt")
    assert checkpoint.embedding_dim == 512 and checkpoint.model_config.embedding_dim is None
    assert set(checkpoint.loss) == {"queue.embeddings", "queue.labels", "queue.total"}
    assert checkpoint.loss["queue.embeddings"].shape == (64, 512)
    assert int(checkpoint.loss["queue.total"]) > 64  # an epoch of 16-image batches wrapped the 64 slots

    loss = CrossBatchMemory(CircleLoss(gamma=80.0), embedding_dim=512, memory_size=64)
    loss.load_state_dict(checkpoint.loss)  # what --resume does
    assert loss.queue.count == 64 and loss.queue.position == int(checkpoint.loss["queue.total"]) % 64
