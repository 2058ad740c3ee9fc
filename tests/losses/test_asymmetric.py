"""Asymmetric loss against BCE and a naive per-label formula; AsymmetricProxyLoss on multi-hot targets."""

import math

import pytest
import torch
import torch.nn.functional as F

from retrieval.losses import AsymmetricProxyLoss
from retrieval.losses.functional import asymmetric_loss


def _batch(seed=0, batch=16, classes=6, scale=3.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, classes, generator=gen, dtype=dtype)
    return logits, (torch.rand(batch, classes, generator=gen) < 0.3).float()


def _naive(logits, targets, gamma_pos, gamma_neg, clip):
    """docs/losses.md section 2, one label at a time in float64."""
    total = 0.0
    for z_row, y_row in zip(logits.double().tolist(), targets.tolist(), strict=True):
        for z, y in zip(z_row, y_row, strict=True):
            p = 1 / (1 + math.exp(-z))
            p_m = max(p - clip, 0.0)
            total -= y * (1 - p) ** gamma_pos * math.log(max(p, 1e-8))
            total -= (1 - y) * p_m**gamma_neg * math.log(max(1 - p_m, 1e-8))
    return total / len(logits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_gammas_and_clip_equal_summed_bce(dtype):
    logits, targets = _batch(dtype=dtype)
    ours, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = asymmetric_loss(ours, targets.to(dtype), gamma_pos=0.0, gamma_neg=0.0, clip=0.0)
    expected = F.binary_cross_entropy_with_logits(ref, targets.to(dtype), reduction="none").sum(1).mean()
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(ours.grad, ref.grad)


@pytest.mark.parametrize(("gamma_pos", "gamma_neg", "clip"), [(0.0, 4.0, 0.05), (1.0, 2.0, 0.2), (0.0, 0.0, 0.1)])
def test_matches_the_naive_formula(gamma_pos, gamma_neg, clip):
    logits, targets = _batch(seed=1)
    loss = asymmetric_loss(logits, targets, gamma_pos, gamma_neg, clip)
    assert loss.item() == pytest.approx(_naive(logits, targets, gamma_pos, gamma_neg, clip), rel=1e-5)


def test_a_negative_below_clip_gives_exactly_zero_loss_and_gradient():
    # sigmoid(-4) = 0.018 < clip = 0.05; sigmoid(-2) = 0.119 is above it.
    logits = torch.tensor([[-4.0, -2.0]], requires_grad=True)
    losses = asymmetric_loss(logits, torch.zeros(1, 2), clip=0.05, gamma_neg=0.0, reduction="none")
    below_only = asymmetric_loss(logits[:, :1], torch.zeros(1, 1), clip=0.05, reduction="none")
    assert below_only.item() == 0.0
    losses.sum().backward()
    assert logits.grad[0, 0].item() == 0.0 and logits.grad[0, 1].item() > 0.0


def test_focusing_weights_carry_no_gradient_by_default():
    logits, targets = _batch(seed=2)
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    asymmetric_loss(a, targets).backward()
    asymmetric_loss(b, targets, no_focal_grad=False).backward()
    assert not torch.allclose(a.grad, b.grad)
    # Reference for the default: the focusing weights computed apart, as constants.
    c = logits.clone().requires_grad_()
    p = torch.sigmoid(c)
    p_m = (p - 0.05).clamp(min=0)
    neg_w = p_m.detach() ** 4
    (-(targets * p.log() + (1 - targets) * neg_w * (1 - p_m).log()).sum(1).mean()).backward()
    torch.testing.assert_close(a.grad, c.grad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gamma_neg": -1.0}, "gamma_neg must be >= 0"),
        ({"clip": 1.0}, "clip must lie"),
        ({"reduction": "x"}, "reduction"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    logits, targets = _batch()
    with pytest.raises(ValueError, match=message):
        asymmetric_loss(logits, targets, **kwargs)
    with pytest.raises(ValueError, match="targets must both be"):
        asymmetric_loss(logits, targets[:, :3])


def test_asymmetric_proxy_loss_on_multi_hot_and_single_label_targets():
    gen = torch.Generator().manual_seed(3)
    embeddings = torch.randn(16, 8, generator=gen)
    _, targets = _batch(seed=4)
    loss_fn = AsymmetricProxyLoss(6, 8, scale=16.0)
    logits = 16.0 * F.normalize(embeddings, dim=1) @ F.normalize(loss_fn.proxies.detach(), dim=1).T
    torch.testing.assert_close(loss_fn(embeddings, targets), asymmetric_loss(logits, targets))
    assert loss_fn.last_stats["logits"].shape == (16, 6) and loss_fn.last_stats["labels"].shape == (16, 6)
    labels = torch.randint(6, (16,), generator=gen)
    torch.testing.assert_close(loss_fn(embeddings, labels), asymmetric_loss(logits, F.one_hot(labels, 6)))
    with pytest.raises(ValueError, match="targets must be"):
        loss_fn(embeddings, targets[:, :5])
