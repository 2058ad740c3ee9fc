"""Miners against naive loops over the batch, on the same distance matrix."""

import pytest
import torch
import torch.nn.functional as F

from retrieval.miners import (
    MINERS,
    AllTripletsMiner,
    BatchHardMiner,
    SemiHardMiner,
    TripletIndices,
    build_miner,
)

DTYPES = [torch.float32, torch.float64]


def _batch(seed: int, dtype: torch.dtype, labels: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    unit = F.normalize(torch.randn(len(labels), 8, generator=generator, dtype=dtype), dim=1)
    return torch.cdist(unit, unit), torch.tensor(labels)


def _as_set(triplets: TripletIndices) -> set[tuple[int, int, int]]:
    return set(zip(triplets.anchor.tolist(), triplets.positive.tolist(), triplets.negative.tolist(), strict=True))


def _naive_all(labels: list[int]) -> set[tuple[int, int, int]]:
    size = len(labels)
    return {
        (a, p, n)
        for a in range(size)
        for p in range(size)
        for n in range(size)
        if a != p and labels[a] == labels[p] and labels[a] != labels[n]
    }


def _naive_batch_hard(distances: torch.Tensor, labels: list[int]) -> set[tuple[int, int, int]]:
    triplets = set()
    for a in range(len(labels)):
        positives = [j for j in range(len(labels)) if j != a and labels[j] == labels[a]]
        negatives = [j for j in range(len(labels)) if labels[j] != labels[a]]
        if positives and negatives:
            farthest = max(positives, key=lambda j: (distances[a, j].item(), -j))
            nearest = min(negatives, key=lambda j: (distances[a, j].item(), j))
            triplets.add((a, farthest, nearest))
    return triplets


def _naive_semihard(distances: torch.Tensor, labels: list[int], margin: float) -> set[tuple[int, int, int]]:
    upper = distances + margin  # same dtype and rounding as the miner's band edge
    triplets = set()
    for a in range(len(labels)):
        negatives = [j for j in range(len(labels)) if labels[j] != labels[a]]
        for p in range(len(labels)):
            if p == a or labels[p] != labels[a] or not negatives:
                continue
            band = [n for n in negatives if distances[a, p] < distances[a, n] < upper[a, p]]
            nearest = min(band or negatives, key=lambda n: (distances[a, n].item(), n))
            triplets.add((a, p, nearest))
    return triplets


LABEL_SETS = [
    [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3],  # P x K
    [0, 1, 0, 2, 2, 1, 3, 0, 4, 4, 4, 5],  # unordered, uneven, anchors without positives
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", LABEL_SETS)
def test_all_triplets_matches_naive(dtype: torch.dtype, labels: list[int]) -> None:
    distances, label_tensor = _batch(0, dtype, labels)
    assert _as_set(AllTripletsMiner()(distances, label_tensor)) == _naive_all(labels)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", LABEL_SETS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_hard_matches_naive(dtype: torch.dtype, labels: list[int], seed: int) -> None:
    distances, label_tensor = _batch(seed, dtype, labels)
    triplets = BatchHardMiner()(distances, label_tensor)
    assert _as_set(triplets) == _naive_batch_hard(distances, labels)
    assert len(triplets.anchor) == len(set(triplets.anchor.tolist()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", LABEL_SETS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("margin", [0.0, 0.05, 0.2, 1.0])
def test_semihard_matches_naive(dtype: torch.dtype, labels: list[int], seed: int, margin: float) -> None:
    distances, label_tensor = _batch(seed, dtype, labels)
    assert _as_set(SemiHardMiner(margin)(distances, label_tensor)) == _naive_semihard(distances, labels, margin)


def test_semihard_picks_nearest_in_band_else_hardest() -> None:
    labels = torch.tensor([0, 0, 1, 1, 1])
    # Anchor 0, positive 1 at 0.5: negatives at 0.9 (easy), 0.6 and 0.65 (semi-hard), so 3 (0.6).
    # Anchor 1, positive 0 at 0.5: negatives at 0.3, 1.5, 1.2: none in (0.5, 0.7), so hardest 2 (0.3).
    distances = torch.tensor(
        [
            [0.0, 0.5, 0.9, 0.6, 0.65],
            [0.5, 0.0, 0.3, 1.5, 1.2],
            [0.9, 0.3, 0.0, 1.0, 1.0],
            [0.6, 1.5, 1.0, 0.0, 1.0],
            [0.65, 1.2, 1.0, 1.0, 0.0],
        ]
    )
    triplets = _as_set(SemiHardMiner(margin=0.2)(distances, labels))
    assert (0, 1, 3) in triplets
    assert (1, 0, 2) in triplets


@pytest.mark.parametrize("name", sorted(MINERS))
def test_mined_indices_are_typed(name: str) -> None:
    distances, labels = _batch(0, torch.float32, LABEL_SETS[0])
    triplets = build_miner(name, margin=0.2)(distances, labels)
    assert isinstance(triplets, TripletIndices)
    assert triplets._fields == ("anchor", "positive", "negative")
    for index in triplets:
        assert index.dtype == torch.int64
        assert index.shape == triplets.anchor.shape
    assert (labels[triplets.anchor] == labels[triplets.positive]).all()
    assert (labels[triplets.anchor] != labels[triplets.negative]).all()
    assert (triplets.anchor != triplets.positive).all()


@pytest.mark.parametrize("name", sorted(MINERS))
@pytest.mark.parametrize("labels", [[0, 1, 2, 3], [5, 5, 5, 5]], ids=["no-positive", "no-negative"])
def test_no_valid_triplets_gives_empty_indices(name: str, labels: list[int]) -> None:
    distances, label_tensor = _batch(0, torch.float32, labels)
    triplets = build_miner(name, margin=0.2)(distances, label_tensor)
    assert all(index.numel() == 0 and index.dtype == torch.int64 for index in triplets)


def test_mining_does_not_track_gradients() -> None:
    distances, labels = _batch(0, torch.float32, LABEL_SETS[0])
    distances.requires_grad_(True)
    for name in MINERS:
        assert not any(index.requires_grad for index in build_miner(name, margin=0.2)(distances, labels))


def test_unknown_miner_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="all, batch_hard, semihard"):
        build_miner("hardest", margin=0.2)


def test_shape_errors_say_what_to_pass() -> None:
    distances, labels = _batch(0, torch.float32, LABEL_SETS[0])
    with pytest.raises(ValueError, match="one label per embedding"):
        BatchHardMiner()(distances, labels[:-1])
    with pytest.raises(ValueError, match="1-D"):
        BatchHardMiner()(distances, labels[:, None])
    with pytest.raises(ValueError, match="margin must be >= 0"):
        SemiHardMiner(margin=-0.1)
