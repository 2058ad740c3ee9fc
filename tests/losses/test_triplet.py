"""TripletLoss: parity with pytorch-metric-learning, naive loops for the mined variants, corner cases."""

import math

import pytest
import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners

from retrieval.losses.functional import cosine_similarity_matrix, euclidean_distance_matrix
from retrieval.losses.triplet import TripletLoss
from retrieval.miners import BatchHardMiner
from tests.losses.pair_batches import LABEL_SETS, make_embeddings, unit_rows

TOLERANCES = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-10, 1e-12)}


def _naive_distances(embeddings: torch.Tensor) -> list[list[float]]:
    unit = unit_rows(embeddings)
    return [[math.dist(a, b) for b in unit] for a in unit]


def _naive_loss(distances: list[list[float]], triplets: list[tuple[int, int, int]], margin: float) -> float:
    losses = [max(distances[a][p] - distances[a][n] + margin, 0.0) for a, p, n in triplets]
    active = [loss for loss in losses if loss > 0]
    return sum(active) / len(active) if active else 0.0


def _naive_batch_hard(distances: list[list[float]], labels: list[int]) -> list[tuple[int, int, int]]:
    triplets = []
    for a in range(len(labels)):
        positives = [j for j in range(len(labels)) if j != a and labels[j] == labels[a]]
        negatives = [j for j in range(len(labels)) if labels[j] != labels[a]]
        if positives and negatives:
            triplets.append(
                (a, max(positives, key=lambda j: distances[a][j]), min(negatives, key=lambda j: distances[a][j]))
            )
    return triplets


def _naive_semihard(distances: list[list[float]], labels: list[int], margin: float) -> list[tuple[int, int, int]]:
    triplets = []
    for a in range(len(labels)):
        negatives = [j for j in range(len(labels)) if labels[j] != labels[a]]
        for p in range(len(labels)):
            if p == a or labels[p] != labels[a] or not negatives:
                continue
            band = [n for n in negatives if distances[a][p] < distances[a][n] < distances[a][p] + margin]
            triplets.append((a, p, min(band or negatives, key=lambda n: distances[a][n])))
    return triplets


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("margin", [0.05, 0.2, 1.0])
def test_all_matches_pml_loss_and_gradient(dtype: torch.dtype, labels: list[int], margin: float) -> None:
    embeddings = make_embeddings(0, len(labels), dtype)
    label_tensor = torch.tensor(labels)
    ours = TripletLoss(margin=margin, miner="all")(embeddings, label_tensor)
    (our_grad,) = torch.autograd.grad(ours, embeddings)
    reference = pml_losses.TripletMarginLoss(margin=margin)(embeddings, label_tensor)
    (reference_grad,) = torch.autograd.grad(reference, embeddings)
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(ours, reference, rtol=rtol, atol=atol)
    torch.testing.assert_close(our_grad, reference_grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_hard_matches_naive_loop(dtype: torch.dtype, labels: list[int], seed: int) -> None:
    embeddings = make_embeddings(seed, len(labels), dtype)
    loss = TripletLoss(margin=0.2, miner="batch_hard")(embeddings, torch.tensor(labels))
    distances = _naive_distances(embeddings)
    expected = _naive_loss(distances, _naive_batch_hard(distances, labels), 0.2)
    assert loss.dtype == dtype
    assert loss.item() == pytest.approx(expected, rel=TOLERANCES[dtype][0], abs=TOLERANCES[dtype][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("margin", [0.1, 0.2, 0.5])
def test_semihard_matches_naive_loop(dtype: torch.dtype, labels: list[int], seed: int, margin: float) -> None:
    embeddings = make_embeddings(seed, len(labels), dtype)
    loss_fn = TripletLoss(margin=margin, miner="semihard")
    loss = loss_fn(embeddings, torch.tensor(labels))
    distances = _naive_distances(embeddings)
    triplets = _naive_semihard(distances, labels, margin)
    expected = _naive_loss(distances, triplets, margin)
    assert loss.item() == pytest.approx(expected, rel=TOLERANCES[dtype][0], abs=TOLERANCES[dtype][1])
    assert loss_fn.last_stats["triplets"].item() == len(triplets)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_hard_matches_pml_miner_and_loss(dtype: torch.dtype) -> None:
    embeddings = make_embeddings(3, 16, dtype)
    labels = torch.tensor(LABEL_SETS["pk"])
    ours = TripletLoss(margin=0.2, miner=BatchHardMiner())(embeddings, labels)
    (our_grad,) = torch.autograd.grad(ours, embeddings)
    reference_loss = pml_losses.TripletMarginLoss(margin=0.2)
    reference = reference_loss(embeddings, labels, pml_miners.BatchHardMiner()(embeddings, labels))
    (reference_grad,) = torch.autograd.grad(reference, embeddings)
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(ours, reference, rtol=rtol, atol=atol)
    torch.testing.assert_close(our_grad, reference_grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("miner", ["all", "batch_hard", "semihard"])
@pytest.mark.parametrize("labels", [[0, 1, 2, 3], [7, 7, 7, 7]], ids=["no-positive", "no-negative"])
def test_no_triplet_gives_zero_loss_that_backpropagates(miner: str, labels: list[int]) -> None:
    embeddings = make_embeddings(0, len(labels), torch.float32)
    loss_fn = TripletLoss(miner=miner)
    loss = loss_fn(embeddings, torch.tensor(labels))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(embeddings.grad, torch.zeros_like(embeddings))
    assert loss_fn.last_stats["triplets"].item() == 0
    assert loss_fn.last_stats["active_fraction"].item() == 0.0


def test_all_easy_triplets_give_zero_loss() -> None:
    embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.01], [-1.0, 0.0], [-1.0, 0.01]], requires_grad=True)
    loss_fn = TripletLoss(margin=0.2, miner="all")
    loss = loss_fn(embeddings, torch.tensor([0, 0, 1, 1]))
    assert loss.item() == 0.0
    loss.backward()
    assert loss_fn.last_stats["triplets"].item() == 8
    assert loss_fn.last_stats["active_fraction"].item() == 0.0


@pytest.mark.parametrize("miner", ["all", "batch_hard", "semihard"])
def test_duplicate_embeddings_keep_gradients_finite(miner: str) -> None:
    base = make_embeddings(0, 8, torch.float32).detach()
    embeddings = torch.cat([base, base]).requires_grad_(True)  # every image twice, as a short class filled by PKSampler
    labels = torch.arange(8).repeat(2)
    TripletLoss(miner=miner)(embeddings, labels).backward()
    assert torch.isfinite(embeddings.grad).all()


def test_distance_matrix_matches_cdist() -> None:
    embeddings = make_embeddings(0, 16, torch.float64).detach()
    unit = torch.nn.functional.normalize(embeddings, dim=1)
    distances = euclidean_distance_matrix(cosine_similarity_matrix(embeddings))
    torch.testing.assert_close(distances, torch.cdist(unit, unit), rtol=0, atol=1e-7)


def test_half_precision_and_autocast_compute_in_float32() -> None:
    embeddings = make_embeddings(0, 16, torch.float32)
    labels = torch.tensor(LABEL_SETS["pk"])
    reference = TripletLoss(miner="all")(embeddings, labels)
    assert TripletLoss(miner="all")(embeddings.detach().half(), labels).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = TripletLoss(miner="all")(embeddings, labels)
    assert autocast.dtype == torch.float32
    torch.testing.assert_close(autocast, reference, rtol=1e-6, atol=1e-6)


def test_bad_arguments_raise_with_a_fix() -> None:
    with pytest.raises(ValueError, match="margin must be >= 0"):
        TripletLoss(margin=-0.2)
    with pytest.raises(ValueError, match="valid names: all, batch_hard, semihard"):
        TripletLoss(miner="hard")
    with pytest.raises(ValueError, match="one label per embedding"):
        TripletLoss()(make_embeddings(0, 16, torch.float32), torch.zeros(15, dtype=torch.long))
