"""PKSampler invariants: P x K batches, coverage, determinism, rank disjointness, short classes."""

import collections
import logging

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from retrieval.data.pk_sampler import PKSampler

RNG = np.random.default_rng(0)
LABEL_SETS = {
    "balanced": np.repeat(np.arange(20), 10),
    "imbalanced": np.repeat(np.arange(30), RNG.integers(2, 25, 30)),
    "shuffled-with-short": RNG.permutation(np.repeat(np.arange(40), RNG.integers(2, 9, 40))),
}


def _check_pk(batch: list[int], labels: np.ndarray, p: int, k: int) -> None:
    counts = collections.Counter(labels[batch].tolist())
    assert len(batch) == p * k
    assert len(counts) == p
    assert set(counts.values()) == {k}


def _check_k_distinct_unless_short(batch: list[int], labels: np.ndarray) -> None:
    sizes = collections.Counter(labels.tolist())
    for cls, count in collections.Counter(labels[batch].tolist()).items():
        indices = [i for i in batch if labels[i] == cls]
        assert len(set(indices)) == min(count, sizes[cls])


@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize(("p", "k"), [(4, 4), (8, 2), (5, 3)])
def test_every_batch_is_p_classes_of_k(labels: np.ndarray, p: int, k: int) -> None:
    sampler = PKSampler(labels, p=p, k=k)
    batches = list(sampler)
    assert len(batches) == len(sampler) == len(labels) // (p * k)
    for batch in batches:
        _check_pk(batch, labels, p, k)
        _check_k_distinct_unless_short(batch, labels)


@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("seed", range(5))
def test_an_epoch_covers_every_class_and_most_images(labels: np.ndarray, seed: int) -> None:
    sampler = PKSampler(labels, p=4, k=4, seed=seed)
    seen = collections.Counter(i for batch in sampler for i in batch)
    assert {labels[i] for i in seen} == set(labels.tolist())
    assert len(seen) / len(labels) >= 0.75  # short classes spend K slots on fewer images


def test_the_plan_depends_only_on_seed_and_epoch() -> None:
    labels = LABEL_SETS["imbalanced"]
    first, again, other_seed = PKSampler(labels, 4, 4), PKSampler(labels, 4, 4), PKSampler(labels, 4, 4, seed=1)
    epoch0 = list(first)
    assert list(first) == epoch0  # iterating twice replays the epoch
    assert list(again) == epoch0
    assert list(other_seed) != epoch0
    first.set_epoch(1)
    epoch1 = list(first)
    assert epoch1 != epoch0
    again.set_epoch(1)
    assert list(again) == epoch1
    first.set_epoch(0)
    assert list(first) == epoch0


@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("p", [4, 12])  # 2 * 12 classes per step exceeds 20: ranks share classes, not images
def test_two_ranks_never_share_an_index_within_a_step(labels: np.ndarray, p: int) -> None:
    ranks = [PKSampler(labels, p=p, k=2, seed=5, rank=rank, world_size=2) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(labels) // (p * 2) // 2
    for batch0, batch1 in zip(*ranks, strict=True):
        _check_pk(batch0, labels, p, 2)
        _check_pk(batch1, labels, p, 2)
        assert not set(batch0) & set(batch1)
    assert list(ranks[0]) != list(ranks[1])


def test_distributed_defaults_come_from_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    labels = LABEL_SETS["balanced"]
    assert list(PKSampler(labels, 4, 2)) == list(PKSampler(labels, 4, 2, rank=1, world_size=2))


def test_short_classes_are_filled_with_replacement() -> None:
    labels = np.array([0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3])
    appearances = 0
    for batch in PKSampler(labels, p=2, k=4, batches_per_epoch=30):
        _check_pk(batch, labels, 2, 4)
        short = [i for i in batch if labels[i] == 0]
        if short:
            appearances += 1
            assert set(short) == {0, 1}
    assert appearances > 0


def test_single_image_classes_are_left_out_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    labels = np.concatenate([np.repeat(np.arange(6), 4), [10, 11, 12]])
    with caplog.at_level(logging.INFO, logger="retrieval.data.pk_sampler"):
        sampler = PKSampler(labels, p=2, k=2)
        seen = set()
        for epoch in range(3):
            sampler.set_epoch(epoch)
            seen.update(i for batch in sampler for i in batch)
    assert not {24, 25, 26} & seen
    assert len(caplog.records) == 1
    assert "3 classes with a single image" in caplog.records[0].getMessage()
    assert len(sampler) == 24 // 4


def test_works_as_a_dataloader_batch_sampler() -> None:
    labels = LABEL_SETS["balanced"]
    loader = DataLoader(TensorDataset(torch.arange(len(labels))), batch_sampler=PKSampler(labels, p=4, k=4))
    sizes = [len(indices) for (indices,) in loader]
    assert sizes == [16] * (len(labels) // 16)


def test_explicit_epoch_length() -> None:
    assert len(list(PKSampler(LABEL_SETS["balanced"], 4, 4, batches_per_epoch=100))) == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"p": 21, "k": 2}, "only 20 classes have at least 2 images; use p <= 20"),
        ({"p": 4, "k": 1}, "use k >= 2"),
        ({"p": 1, "k": 4}, "use p >= 2"),
        ({"p": 4, "k": 4, "batches_per_epoch": 0}, "batches_per_epoch must be >= 1"),
        ({"p": 4, "k": 4, "rank": 2, "world_size": 2}, "0 <= rank < world_size"),
        ({"p": 16, "k": 6, "world_size": 2}, "lower p or k, or use fewer ranks"),
        ({"p": 20, "k": 11}, "do not fill one batch"),
        ({"p": 4, "k": 4, "seed": -1}, "seed must be >= 0"),
    ],
)
def test_impossible_requests_fail_with_a_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PKSampler(LABEL_SETS["balanced"], **kwargs)


def test_labels_must_be_one_dimensional() -> None:
    with pytest.raises(ValueError, match="1-D"):
        PKSampler(np.zeros((4, 2)), p=2, k=2)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        PKSampler(LABEL_SETS["balanced"], 2, 2).set_epoch(-1)
