"""Two CPU processes (torchrun, gloo) train like one process given the same global batch, and print once.

One torchrun launch (two processes importing PyTorch take most of its time) checks four losses' first step, a
proxy loss, a pair loss, a pytorch-metric-learning pair loss with a miner and one with class centres, and a
cross-batch memory's steps (each rank's memory holds every rank's embeddings), then runs `retrieval train` on
a `pml.` loss and `retrieval pretrain` end to end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from safetensors.torch import load_file

from retrieval.config import load_config
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_BACKBONE, write_csv_dataset
from tests.pretrain.pretraining import TINY as TINY_PRETRAIN
from tests.train.ddp_worker import COMMAND_END, MEMORY_CASE, first_step, memory, memory_batches

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("ddp_worker.py")
# The digits demo, shrunk to seconds. BatchNorm frozen: without SyncBatchNorm (GPU only) each rank
# normalizes with its own share's statistics, which a single process given the whole batch does not.
TINY = [
    f"model.backbone={TINY_BACKBONE}",
    "model.embedding_dim=16",
    "data.image_size=16",
    "train.threads=1",
    "train.freeze_bn=true",
    "train.freeze_backbone_epochs=0",
    "train.plots=false",
]
CASES = {
    "anchor": [*TINY, "loss.name=anchor", "data.batch_size=32"],  # proxies: DDP averages their gradients
    "circle": [*TINY, "loss.name=circle", "data.p=4", "data.k=4"],  # pairs: the embeddings of both ranks gathered
    # a PML pair loss and a miner: every rank mines and scores the gathered global batch
    "multi_similarity": [*TINY, "loss.name=multi_similarity", "data.p=4", "data.k=4"],
    # PML class centres: DDP averages the ranks' gradients of a per-sample mean
    "soft_triple": [*TINY, "loss.name=soft_triple", "data.batch_size=32"],
}
# The end-to-end run: a pytorch-metric-learning loss and miner named by class, through the adapter.
ADAPTER = ["loss.name=pml.NTXentLoss", "loss.miner=pml.MultiSimilarityMiner", "data.p=4", "data.k=4"]


class Launch(NamedTuple):
    """What the torchrun launch left: its output folder, each rank's saved steps, and what each command printed."""

    folder: Path
    ranks: list[dict]
    train_stdout: str
    pretrain_stdout: str


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> Launch:
    folder = tmp_path_factory.mktemp("torchrun")
    train = ["train", *(f"--set={o}" for o in [*TINY, *ADAPTER, "train.epochs=1"]), "--output-dir", str(folder / "run")]
    pretrain = ["pretrain", "--csv", str(write_csv_dataset(folder / "data")), "--output-dir", str(folder / "ddp")]
    pretrain += [f"--set={o}" for o in [*TINY_PRETRAIN, "pretrain.epochs=1"]]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [*command, str(WORKER), str(folder), json.dumps(CASES), json.dumps([train, pretrain])],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(folder / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    train_stdout, pretrain_stdout, rest = done.stdout.split(COMMAND_END + "\n")
    assert rest == ""
    return Launch(folder, ranks, train_stdout, pretrain_stdout)


@pytest.mark.filterwarnings("ignore:train.freeze_bn is set but the backbone starts from scratch")
def test_two_processes_match_one_process_on_the_global_batch_and_print_one_result(launch: Launch, tmp_path):
    ranks, run = launch.ranks, launch.folder / "run"
    for name, overrides in CASES.items():
        shares = [rank[name] for rank in ranks]
        assert not torch.equal(shares[0]["labels"], shares[1]["labels"]) or not torch.equal(
            shares[0]["images"], shares[1]["images"]
        ), f"{name}: both ranks trained on the same images"
        images = torch.cat([share["images"] for share in shares])
        labels = torch.cat([share["labels"] for share in shares])
        trainer = Trainer.from_config(load_config(None, overrides), tmp_path / "single")
        single = first_step(trainer, (images, labels))
        # Pair losses see the global batch on every rank; proxy losses average the ranks' losses.
        losses = torch.stack([share["loss"] for share in shares])
        expected = losses if trainer.parts.loss.needs_pk_batches else losses.mean()
        torch.testing.assert_close(expected, single["loss"].expand_as(expected), rtol=1e-5, atol=1e-6, msg=name)
        assert shares[0]["grads"].keys() == single["grads"].keys() and single["grads"]
        assert name != "soft_triple" or "loss.loss.fc" in single["grads"]  # the centres train, averaged by DDP
        # float32 sums in another order (two processes + all-reduce vs one): measured up to 2.2e-5 of a
        # tensor's largest gradient on this project's CPUs; a missing world-size factor is off by 0.5.
        for key, reference in single["grads"].items():
            scale = reference.abs().max().item()
            for share in shares:
                torch.testing.assert_close(share["grads"][key], reference, rtol=1e-4, atol=1e-4 * scale, msg=key)

    lines = launch.train_stdout.splitlines()
    assert sum(line.startswith("Recall@1: ") for line in lines) == 1
    assert [line.split(":")[0] for line in lines[-5:]] == ["Recall@1", "Recall@2", "Recall@4", "Recall@8", "MAP@R"]
    assert sum(re.match(r"epoch 1/1 ", line) is not None for line in lines) == 1
    assert json.loads((run / "result.json").read_text())["test"]["recall@1"] > 0
    environment = json.loads((run / "environment.json").read_text())
    assert environment["world_size"] == 2


def test_every_rank_enqueues_the_global_batch_in_its_cross_batch_memory(launch: Launch) -> None:
    """Was tests/losses/test_memory_distributed.py (its own two spawned processes): the same check, in the launch."""
    single = memory()
    expected = torch.stack([single(embeddings, labels).detach() for embeddings, labels in memory_batches()])
    for rank in launch.ranks:
        saved = rank[MEMORY_CASE]
        torch.testing.assert_close(saved["losses"], expected, rtol=1e-6, atol=1e-6)
        for name, tensor in single.state_dict().items():
            torch.testing.assert_close(saved["state"][name], tensor, rtol=0, atol=0, msg=name)


def test_two_torchrun_processes_pretrain_one_run_and_print_once(launch: Launch) -> None:
    """Was tests/cli/test_pretrain_cli.py's test of the same name (its own torchrun launch)."""
    run = launch.folder / "ddp"
    assert launch.pretrain_stdout.count("backbone weights: ") == 1 and launch.pretrain_stdout.count("epoch 1/1 ") == 1
    assert json.loads((run / "environment.json").read_text())["world_size"] == 2
    assert load_file(run / "backbone.safetensors")
