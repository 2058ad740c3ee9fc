"""Proxy-Anchor against a naive loop over the paper's formula; proxies stay float32 under autocast."""

import math

import pytest
import torch
import torch.nn.functional as F

from retrieval.losses import ProxyAnchorLoss


def _naive_proxy_anchor(embeddings, proxies, labels, margin, alpha):
    """Kim et al. 2020, eq. 4, one proxy at a time in float64."""
    cos = F.normalize(embeddings.double(), dim=1) @ F.normalize(proxies.double(), dim=1).T
    positive, negative, with_positives = 0.0, 0.0, 0
    for p in range(proxies.shape[0]):
        pos = [math.exp(-alpha * (float(cos[i, p]) - margin)) for i in range(len(labels)) if int(labels[i]) == p]
        neg = [math.exp(alpha * (float(cos[i, p]) + margin)) for i in range(len(labels)) if int(labels[i]) != p]
        if pos:
            with_positives += 1
            positive += math.log1p(sum(pos))
        negative += math.log1p(sum(neg))
    return positive / with_positives + negative / proxies.shape[0]


@pytest.mark.parametrize(("margin", "alpha"), [(0.1, 32.0), (0.0, 8.0)])
def test_proxy_anchor_matches_the_paper_formula(margin, alpha):
    gen = torch.Generator().manual_seed(0)
    embeddings, labels = torch.randn(24, 8, generator=gen), torch.randint(0, 6, (24,), generator=gen)
    loss_fn = ProxyAnchorLoss(10, 8, margin=margin, alpha=alpha)  # 4 proxies never in the batch
    expected = _naive_proxy_anchor(embeddings, loss_fn.proxies.detach(), labels, margin, alpha)
    assert loss_fn(embeddings, labels).item() == pytest.approx(expected, rel=1e-5)


def test_proxies_train_and_stay_float32_under_bf16_autocast():
    loss_fn = ProxyAnchorLoss(5, 8)
    embeddings = torch.randn(10, 8).bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(embeddings, torch.arange(10) % 5)
    loss.backward()
    assert loss.dtype == torch.float32 and loss_fn.proxies.dtype == torch.float32
    assert loss_fn.proxies.grad is not None and embeddings.grad is not None
    assert [name for name, _ in loss_fn.named_parameters()] == ["loss.proxies"]


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="alpha must be > 0"):
        ProxyAnchorLoss(3, 4, alpha=0.0)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        ProxyAnchorLoss(3, 4)(torch.randn(2, 4), torch.tensor([0, 3]))
