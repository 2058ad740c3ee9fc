"""CircleLoss: a naive per-anchor loop, parity with pytorch-metric-learning, corner cases."""

import math

import pytest
import torch
from pytorch_metric_learning import losses as pml_losses

from retrieval.losses.circle import CircleLoss
from tests.losses.pair_batches import LABEL_SETS, make_embeddings, unit_rows

# (rtol, atol) per dtype for losses of magnitude ~100 and their gradients.
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-12)}


def _naive_circle(embeddings: torch.Tensor, labels: list[int], m: float, gamma: float) -> float:
    unit = unit_rows(embeddings)
    losses = []
    for i in range(len(labels)):
        positive_logits, negative_logits = [], []
        for j in range(len(labels)):
            if j == i:
                continue
            s = sum(a * b for a, b in zip(unit[i], unit[j], strict=True))
            if labels[j] == labels[i]:
                positive_logits.append(-gamma * max(1 + m - s, 0.0) * (s - (1 - m)))
            else:
                negative_logits.append(gamma * max(s + m, 0.0) * (s - m))
        if positive_logits and negative_logits:
            x = _logsumexp(positive_logits) + _logsumexp(negative_logits)
            losses.append(max(x, 0.0) + math.log1p(math.exp(-abs(x))))
    return sum(losses) / len(losses) if losses else 0.0


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize(("m", "gamma"), [(0.25, 256.0), (0.4, 80.0)])
def test_matches_naive_loop(dtype: torch.dtype, labels: list[int], m: float, gamma: float) -> None:
    embeddings = make_embeddings(0, len(labels), dtype)
    loss = CircleLoss(m=m, gamma=gamma)(embeddings, torch.tensor(labels))
    rtol, atol = TOLERANCES[dtype]
    assert loss.dtype == dtype
    assert loss.item() == pytest.approx(_naive_circle(embeddings, labels, m, gamma), rel=rtol, abs=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_pml_loss_and_gradient(dtype: torch.dtype, labels: list[int], seed: int) -> None:
    embeddings = make_embeddings(seed, len(labels), dtype)
    label_tensor = torch.tensor(labels)
    ours = CircleLoss(m=0.25, gamma=256.0)(embeddings, label_tensor)
    (our_grad,) = torch.autograd.grad(ours, embeddings)
    reference = pml_losses.CircleLoss(m=0.25, gamma=256.0)(embeddings, label_tensor)
    (reference_grad,) = torch.autograd.grad(reference, embeddings)
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(ours, reference, rtol=rtol, atol=atol)
    torch.testing.assert_close(our_grad, reference_grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("labels", [[0, 1, 2, 3], [7, 7, 7, 7]], ids=["no-positive", "no-negative"])
def test_no_valid_anchor_gives_zero_loss_that_backpropagates(labels: list[int]) -> None:
    embeddings = make_embeddings(0, len(labels), torch.float32)
    loss_fn = CircleLoss()
    loss = loss_fn(embeddings, torch.tensor(labels))
    assert loss.item() == 0.0
    assert loss.requires_grad
    loss.backward()
    assert embeddings.grad is not None
    assert torch.equal(embeddings.grad, torch.zeros_like(embeddings))
    assert loss_fn.last_stats["valid_anchors"].item() == 0


def test_last_stats_counts_valid_anchors() -> None:
    loss_fn = CircleLoss()
    loss_fn(make_embeddings(0, 12, torch.float32), torch.tensor(LABEL_SETS["uneven"]))
    assert loss_fn.last_stats["valid_anchors"].item() == 10
    assert not loss_fn.last_stats["valid_anchors"].requires_grad


def test_half_precision_and_autocast_compute_in_float32() -> None:
    embeddings = make_embeddings(0, 16, torch.float32)
    labels = torch.tensor(LABEL_SETS["pk"])
    reference = CircleLoss()(embeddings, labels)
    half = CircleLoss()(embeddings.detach().half(), labels)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, reference.detach(), rtol=1e-2, atol=1e-2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = CircleLoss()(embeddings, labels)
    assert autocast.dtype == torch.float32
    torch.testing.assert_close(autocast, reference, rtol=1e-6, atol=1e-6)


def test_bad_arguments_raise_with_a_fix() -> None:
    with pytest.raises(ValueError, match="m must be >= 0"):
        CircleLoss(m=-0.1)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        CircleLoss(gamma=0.0)
    with pytest.raises(ValueError, match="one label per embedding"):
        CircleLoss()(make_embeddings(0, 16, torch.float32), torch.zeros(15, dtype=torch.long))
    with pytest.raises(ValueError, match=r"2-D, shape \(B, D\)"):
        CircleLoss()(torch.randn(2, 4, 8), torch.zeros(2, dtype=torch.long))
