"""Focal loss and FocalProxyLoss against F.cross_entropy and a naive per-sample formula."""

import math

import pytest
import torch
import torch.nn.functional as F

from retrieval.losses import FocalProxyLoss, ProxyNCALoss
from retrieval.losses.functional import focal_loss


def _logits(seed=0, batch=24, classes=7, scale=4.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, classes, generator=gen, dtype=dtype)
    return logits, torch.randint(classes, (batch,), generator=gen)


def _naive_focal(logits, targets, gamma, alpha=None):
    """-alpha_y (1 - p_t)^gamma log p_t, one sample at a time, float64."""
    total = 0.0
    for row, y in zip(logits.double(), targets, strict=True):
        log_pt = float(row[int(y)] - torch.logsumexp(row, 0))
        weight = 1.0 if alpha is None else float(alpha[int(y)])
        total += -weight * (1.0 - math.exp(log_pt)) ** gamma * log_pt
    return total / len(targets)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gamma_zero_equals_cross_entropy_in_loss_and_gradient(dtype, reduction):
    logits, targets = _logits(dtype=dtype)
    ours, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss, expected = (
        focal_loss(ours, targets, gamma=0.0, reduction=reduction),
        F.cross_entropy(ref, targets, reduction=reduction),
    )
    torch.testing.assert_close(loss, expected)
    loss.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(ours.grad, ref.grad)


@pytest.mark.parametrize("gamma", [0.5, 2.0, 5.0])
def test_focal_matches_the_naive_formula(gamma):
    logits, targets = _logits(seed=1)
    alpha = torch.rand(7, generator=torch.Generator().manual_seed(2))
    assert focal_loss(logits, targets, gamma).item() == pytest.approx(_naive_focal(logits, targets, gamma), rel=1e-5)
    assert focal_loss(logits, targets, gamma, alpha).item() == pytest.approx(
        _naive_focal(logits, targets, gamma, alpha), rel=1e-5
    )


def test_alpha_of_ones_changes_nothing():
    logits, targets = _logits(seed=3)
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    with_alpha, without = focal_loss(a, targets, 2.0, torch.ones(7)), focal_loss(b, targets, 2.0)
    torch.testing.assert_close(with_alpha, without)
    with_alpha.backward()
    without.backward()
    torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0])
def test_extreme_and_half_precision_logits_stay_finite(gamma):
    extreme = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    targets = torch.tensor([0, 0, 2])  # right with certainty, wrong with certainty, uniform
    loss = focal_loss(extreme, targets, gamma)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(extreme.grad).all()
    half = (_logits(seed=4)[0] * 1000).half().requires_grad_()
    loss = focal_loss(half, _logits(seed=4)[1], gamma)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(half.grad).all()


@pytest.mark.parametrize(
    ("logits", "targets", "kwargs", "message"),
    [
        (torch.zeros(4), torch.zeros(4, dtype=torch.long), {}, "logits must be"),
        (torch.zeros(4, 3), torch.zeros(5, dtype=torch.long), {}, "targets must be"),
        (torch.zeros(4, 3), torch.zeros(4, 3), {}, "targets must be"),
        (torch.zeros(4, 3), torch.zeros(4, dtype=torch.long), {"gamma": -1.0}, "gamma must be >= 0"),
        (torch.zeros(4, 3), torch.zeros(4, dtype=torch.long), {"alpha": torch.ones(4)}, "alpha must hold"),
        (torch.zeros(4, 3), torch.zeros(4, dtype=torch.long), {"reduction": "avg"}, "reduction must be"),
    ],
)
def test_bad_inputs_raise_value_error(logits, targets, kwargs, message):
    with pytest.raises(ValueError, match=message):
        focal_loss(logits, targets, **kwargs)


def test_focal_proxy_is_focal_loss_of_its_logits_and_proxy_nca_at_gamma_zero():
    gen = torch.Generator().manual_seed(5)
    embeddings, labels = torch.randn(32, 16, generator=gen), torch.randint(10, (32,), generator=gen)
    alpha = torch.rand(10, generator=gen).tolist()
    loss_fn = FocalProxyLoss(10, 16, gamma=2.0, alpha=alpha)
    emb = embeddings.clone().requires_grad_()
    loss = loss_fn(emb, labels)
    loss.backward()
    ref_emb = embeddings.clone().requires_grad_()
    logits = 16.0 * F.normalize(ref_emb, dim=1) @ F.normalize(loss_fn.proxies.detach(), dim=1).T
    expected = focal_loss(logits, labels, 2.0, torch.tensor(alpha))
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(emb.grad, ref_emb.grad)

    plain, focal0 = ProxyNCALoss(10, 16), FocalProxyLoss(10, 16, gamma=0.0)
    focal0.proxies.data.copy_(plain.proxies.data)
    torch.testing.assert_close(focal0(embeddings, labels), plain(embeddings, labels))


def test_focal_proxy_rejects_bad_arguments():
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        FocalProxyLoss(3, 4, gamma=-0.5)
    with pytest.raises(ValueError, match="alpha must hold one weight per class"):
        FocalProxyLoss(3, 4, alpha=[1.0, 2.0])
