"""Two CPU processes (torchrun, gloo) train a PML pair loss and a PML weight loss like one process given the global
batch, and `retrieval train` runs a `pml.` loss end to end under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from retrieval.config import load_config
from retrieval.train.trainer import Trainer
from tests.train.ddp_worker import first_step

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parents[1] / "train" / "ddp_worker.py"
# The digits demo shrunk to seconds, BatchNorm frozen (each rank would normalize its own share otherwise).
TINY = [
    "model.backbone=resnet10t",
    "model.embedding_dim=16",
    "data.image_size=16",
    "train.threads=1",
    "train.freeze_bn=true",
    "train.freeze_backbone_epochs=0",
    "train.plots=false",
]
CASES = {
    # pairs and a miner: every rank mines and scores the gathered global batch
    "multi_similarity": [*TINY, "loss.name=multi_similarity", "data.p=4", "data.k=4"],
    # class centres: DDP averages the ranks' gradients of a per-sample mean
    "soft_triple": [*TINY, "loss.name=soft_triple", "data.batch_size=32"],
}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:train.freeze_bn is set but the backbone starts from scratch")
def test_two_processes_match_one_process_for_a_pml_pair_loss_and_a_pml_weight_loss(tmp_path):
    run = tmp_path / "run"
    adapter = ["loss.name=pml.NTXentLoss", "loss.miner=pml.MultiSimilarityMiner", "data.p=4", "data.k=4"]
    train = ["train", *(f"--set={o}" for o in [*TINY, *adapter, "train.epochs=1"]), "--output-dir", str(run)]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [*command, str(WORKER), str(tmp_path), json.dumps(CASES), *train],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    ranks = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    for name, overrides in CASES.items():
        shares = [rank[name] for rank in ranks]
        images = torch.cat([share["images"] for share in shares])
        labels = torch.cat([share["labels"] for share in shares])
        trainer = Trainer.from_config(load_config(None, overrides), tmp_path / "single")
        single = first_step(trainer, (images, labels))
        losses = torch.stack([share["loss"] for share in shares])
        expected = losses if trainer.parts.loss.needs_pk_batches else losses.mean()
        torch.testing.assert_close(expected, single["loss"].expand_as(expected), rtol=1e-5, atol=1e-6)
        assert shares[0]["grads"].keys() == single["grads"].keys()
        assert name != "soft_triple" or "loss.loss.fc" in single["grads"]  # the centres train, averaged by DDP
        for key, reference in single["grads"].items():
            scale = reference.abs().max().item()
            for share in shares:
                torch.testing.assert_close(share["grads"][key], reference, rtol=1e-4, atol=1e-4 * scale, msg=key)

    assert json.loads((run / "result.json").read_text())["test"]["recall@1"] > 0
