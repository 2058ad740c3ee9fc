"""ArcFace and CosFace against pytorch-metric-learning and docs/losses.md's formulas, with the monotone fallback."""

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import ArcFaceLoss as PMLArcFaceLoss
from pytorch_metric_learning.losses import CosFaceLoss as PMLCosFaceLoss

from retrieval.losses import ArcFaceLoss, CosFaceLoss, ProxyNCALoss
from retrieval.losses.functional import additive_angular_margin, additive_cosine_margin, cosine_to_proxies


def _batch(seed=0, batch=32, dim=16, classes=10, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, dim, generator=gen, dtype=dtype), torch.randint(classes, (batch,), generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("ours_cls", "pml", "margin", "pml_margin"),
    [
        (ArcFaceLoss, PMLArcFaceLoss, 0.5, math.degrees(0.5)),
        (ArcFaceLoss, PMLArcFaceLoss, 1.2, math.degrees(1.2)),  # large m: many samples take the fallback
        (CosFaceLoss, PMLCosFaceLoss, 0.35, 0.35),
    ],
)
def test_margin_losses_match_pytorch_metric_learning(ours_cls, pml, margin, pml_margin, dtype):
    embeddings, labels = _batch(dtype=dtype)
    ours = ours_cls(10, 16, scale=30.0, margin=margin)
    ref = pml(num_classes=10, embedding_size=16, margin=pml_margin, scale=30.0).to(dtype)
    ref.W.data.copy_(ours.proxies.data.T)
    emb_ours, emb_ref = embeddings.clone().requires_grad_(), embeddings.clone().requires_grad_()
    loss_ours, loss_ref = ours(emb_ours, labels), ref(emb_ref, labels)
    loss_ours.backward()
    loss_ref.backward()
    tol = 2e-5  # our logits are float32 by contract
    torch.testing.assert_close(loss_ours.double(), loss_ref.double(), rtol=tol, atol=tol)
    torch.testing.assert_close(emb_ours.grad.double(), emb_ref.grad.double(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.proxies.grad.double(), ref.W.grad.T.double(), rtol=1e-4, atol=1e-5)


def _naive_arcface_target(cos: float, m: float) -> float:
    theta = math.acos(min(max(cos, -1 + 1e-7), 1 - 1e-7))
    return math.cos(theta + m) if theta + m <= math.pi else cos - m * math.sin(m)


@pytest.mark.parametrize("margin", [0.1, 0.5, 1.0])
def test_arcface_target_matches_the_formula_and_keeps_decreasing_in_the_angle(margin):
    angles = torch.linspace(0.0, math.pi, 1001, dtype=torch.float64)
    cosine = torch.stack([angles.cos(), torch.zeros_like(angles)], dim=1)
    labels = torch.zeros(len(angles), dtype=torch.long)
    target = additive_angular_margin(cosine, labels, margin)[:, 0]
    expected = torch.tensor([_naive_arcface_target(float(c), margin) for c in angles.cos()], dtype=torch.float64)
    torch.testing.assert_close(target, expected)
    assert torch.all(target[1:] < target[:-1])  # strictly decreasing across the fallback's seam
    assert torch.all(additive_angular_margin(cosine, labels, margin)[:, 1] == 0)  # other columns untouched


def test_arcface_gradient_is_finite_at_cosine_plus_and_minus_one():
    cosine = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], requires_grad=True)
    additive_angular_margin(cosine, torch.tensor([0, 0]), 0.5).sum().backward()
    assert torch.isfinite(cosine.grad).all()


def test_cosface_lowers_only_the_target_cosine():
    embeddings, labels = _batch(seed=3)
    loss_fn = CosFaceLoss(10, 16)
    cosine = cosine_to_proxies(embeddings, loss_fn.proxies)
    shifted = additive_cosine_margin(cosine, labels, 0.35)
    torch.testing.assert_close(shifted, cosine - 0.35 * F.one_hot(labels, 10))
    torch.testing.assert_close(loss_fn(embeddings, labels), F.cross_entropy(30.0 * shifted, labels))


def test_zero_margin_equals_proxy_nca_at_the_same_scale():
    embeddings, labels = _batch(seed=4)
    plain = ProxyNCALoss(10, 16, scale=30.0)
    for loss_cls in (ArcFaceLoss, CosFaceLoss):
        loss_fn = loss_cls(10, 16, margin=0.0)
        loss_fn.proxies.data.copy_(plain.proxies.data)
        torch.testing.assert_close(loss_fn(embeddings, labels), plain(embeddings, labels), rtol=1e-5, atol=1e-5)


def test_negative_margin_is_rejected():
    with pytest.raises(ValueError, match="margin must be >= 0"):
        ArcFaceLoss(3, 4, margin=-0.1)
