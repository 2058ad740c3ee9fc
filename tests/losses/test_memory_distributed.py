"""Two CPU processes (gloo): each rank's cross-batch memory holds every rank's embeddings, as one process's would."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from retrieval.losses import CircleLoss, CrossBatchMemory
from tests.losses.memory_worker import DIM, MEMORY, WORLD, free_port, global_batches, rank_worker

pytestmark = pytest.mark.slow


def test_every_rank_enqueues_the_global_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Spawned ranks unpickle `rank_worker` by its module name, on the sys.path they inherit from this process.
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))
    mp.start_processes(rank_worker, args=(free_port(), tmp_path), nprocs=WORLD, start_method="spawn")
    single = CrossBatchMemory(CircleLoss(gamma=80.0), DIM, MEMORY)
    expected = torch.stack([single(embeddings, labels).detach() for embeddings, labels in global_batches()])
    for rank in range(WORLD):
        saved = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        torch.testing.assert_close(saved["losses"], expected, rtol=1e-6, atol=1e-6)
        for name, tensor in single.state_dict().items():
            torch.testing.assert_close(saved["state"][name], tensor, rtol=0, atol=0, msg=name)
