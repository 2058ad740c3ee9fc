"""Every registered loss honours `MetricLoss`: it builds, trains a step, and declares its members with their types."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from retrieval.losses import LOSSES, MetricLoss, build_loss, pair_losses
from retrieval.losses.base import PairLoss

CLASSES, DIM, PER_CLASS = 4, 8, 2


def _batch() -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.randn(CLASSES * PER_CLASS, DIM, generator=generator, requires_grad=True)
    return embeddings, torch.arange(CLASSES).repeat_interleave(PER_CLASS)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_trains_a_step_and_declares_the_protocol(name: str) -> None:
    loss = build_loss(name, {}, num_classes=CLASSES, embedding_dim=DIM)
    assert isinstance(loss, MetricLoss)
    embeddings, labels = _batch()
    value = loss(embeddings, labels)
    assert value.shape == () and torch.isfinite(value)
    value.backward()
    assert embeddings.grad is not None and torch.isfinite(embeddings.grad).all()
    for param_name, param in loss.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), param_name

    assert type(loss.multi_label) is bool and type(loss.needs_pk_batches) is bool
    assert type(loss.check_labels) is bool and loss.check_labels
    assert isinstance(loss.logit_scale, float) and loss.logit_scale > 0
    assert isinstance(loss.last_stats, dict)
    assert all(isinstance(key, str) and isinstance(stat, Tensor) for key, stat in loss.last_stats.items())
    assert all(not stat.requires_grad for stat in loss.last_stats.values())
    if loss.proxies is None and loss.needs_pk_batches:
        assert not list(loss.parameters())
    elif loss.proxies is None:  # several centres a class (SoftTriple): trained parameters, no one proxy each
        assert list(loss.parameters())
    else:
        assert isinstance(loss.proxies, Tensor) and loss.proxies.shape == (CLASSES, DIM)
        assert any(loss.proxies is param for param in loss.parameters())
    assert loss.set_epoch(3) is None


def test_pair_losses_are_the_registry_view_of_needs_pk_batches() -> None:
    assert pair_losses() == {name for name, cls in LOSSES.items() if cls.needs_pk_batches}
    assert pair_losses() == {name for name, cls in LOSSES.items() if issubclass(cls, PairLoss)}
    assert pair_losses() >= {"circle", "triplet"}  # our own pair losses, beside PML's presets
    assert [name for name, cls in LOSSES.items() if cls.multi_label] == ["asymmetric_proxy"]


@pytest.mark.parametrize("name", sorted(pair_losses()))
def test_every_pair_loss_has_the_one_memory_aware_forward(name: str) -> None:
    loss = build_loss(name, {}, num_classes=CLASSES, embedding_dim=DIM)
    assert isinstance(loss, PairLoss) and type(loss).forward is PairLoss.forward
    embeddings, labels = _batch()
    memory = embeddings.detach()[:4] + 0.1
    with_memory = loss(embeddings, labels, memory, labels[:4])
    assert with_memory.shape == () and torch.isfinite(with_memory)
    with pytest.raises(ValueError, match="together"):  # a memory without its labels is refused, never dropped
        loss(embeddings, labels, memory, None)


@pytest.mark.parametrize(
    ("name", "params", "scale"),
    [
        ("proxy_nca", {"scale": 20.0}, 20.0),
        ("anchor", {"gamma": 12.0}, 12.0),
        ("arcface", {}, 30.0),
        ("cosface", {"scale": 24.0}, 24.0),
        ("focal_proxy", {}, 16.0),
        ("asymmetric_proxy", {"scale": 8.0}, 8.0),
        ("proxy_anchor", {}, 1.0),
        ("circle", {}, 1.0),
        ("soft_triple", {}, 1.0),
    ],
)
def test_logit_scale_is_the_base_scale_of_the_logits(name: str, params: dict[str, float], scale: float) -> None:
    assert build_loss(name, params, num_classes=CLASSES, embedding_dim=DIM).logit_scale == scale


def test_proxy_anchor_skips_its_label_check_when_told() -> None:
    loss = build_loss("proxy_anchor", {}, num_classes=CLASSES, embedding_dim=DIM)
    embeddings, labels = _batch()
    with pytest.raises(ValueError, match="labels must lie in"):
        loss(embeddings, labels + CLASSES)
    loss.check_labels = False
    with pytest.raises(RuntimeError, match="smaller than num_classes"):  # unchecked: only torch's one_hot objects
        loss(embeddings, labels + CLASSES)
