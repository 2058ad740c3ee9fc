"""The pretraining objectives: SimCLR is PML's NT-Xent over twin views; SimSiam's loss stops the target's gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import NTXentLoss, SelfSupervisedLoss

from retrieval.config import PretrainConfig
from retrieval.pretrain.methods import SimCLRLoss, SimSiamLoss, build_method


def test_simclr_loss_is_pml_self_supervised_ntxent_on_the_two_views():
    torch.manual_seed(0)
    first, second = torch.randn(6, 8), torch.randn(6, 8)
    labels = torch.arange(6).repeat(2)  # view i and view 6 + i are one image
    ours = SimCLRLoss(temperature=0.2)(torch.cat([first, second]), labels)
    reference = SelfSupervisedLoss(NTXentLoss(temperature=0.2), symmetric=True)(first, second)
    torch.testing.assert_close(ours, reference)


def test_simclr_loss_is_low_when_twins_agree_and_others_differ():
    views = torch.eye(4).repeat(2, 1)
    agreeing = SimCLRLoss(0.1)(views, torch.arange(4).repeat(2))
    shuffled = SimCLRLoss(0.1)(torch.cat([torch.eye(4), torch.eye(4).roll(1, 0)]), torch.arange(4).repeat(2))
    assert agreeing < 0.01 < shuffled


def test_simsiam_loss_is_the_symmetrized_negative_cosine_with_the_target_stopped():
    torch.manual_seed(0)
    z, p = torch.randn(8, 5, requires_grad=True), torch.randn(8, 5, requires_grad=True)
    loss = SimSiamLoss(5)(torch.cat([z, p], dim=1), torch.zeros(8))
    z1, z2, p1, p2 = z[:4], z[4:], p[:4], p[4:]
    expected = -0.5 * (F.cosine_similarity(p1, z2, dim=1).mean() + F.cosine_similarity(p2, z1, dim=1).mean())
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert z.grad is not None and torch.count_nonzero(z.grad) == 0  # the projections are targets only
    assert p.grad is not None and torch.count_nonzero(p.grad) > 0


@pytest.mark.parametrize(("method", "width"), [("simclr", 16), ("simsiam", 32)])
def test_each_method_builds_a_head_of_its_width(method, width):
    head, loss = build_method(PretrainConfig(method=method, hidden_dim=24, projection_dim=16), feature_width=10)
    outputs = head(torch.randn(6, 10))
    assert outputs.shape == (6, width)
    assert torch.isfinite(loss(outputs, torch.arange(3).repeat(2)))
