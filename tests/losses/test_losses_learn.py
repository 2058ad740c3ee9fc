"""Every registered loss, and a listed set of `pml.<ClassName>` adapters, with default parameters, teaches an
untrained network to retrieve.

A small MLP embeds scikit-learn's digits whose 64 pixels hide among 448 noise features, so an
untrained network retrieves little (Recall@1 about 0.12: the noise dominates its random
projection) and 300 Adam steps of a working loss must find the pixels. A sign or reduction error
in a loss, or defaults that cannot learn from scratch, leave Recall@1 near the untrained value.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import Tensor, nn

from retrieval.data import PKSampler
from retrieval.losses import LOSSES, MetricLoss, build_loss
from retrieval.metrics import per_query_scores

pytestmark = pytest.mark.slow

STEPS = 300
EMBEDDING_DIM = 16
# PML losses through the adapter at PML's own defaults: pair losses (with and without a miner) and losses
# with class weights (proxies, a softmax weight).
ADAPTERS = [
    "pml.CircleLoss",
    "pml.FastAPLoss",
    "pml.LiftedStructureLoss",
    "pml.MarginLoss",
    "pml.NTXentLoss",
    "pml.NormalizedSoftmaxLoss",
    "pml.ProxyNCALoss",
    "pml.SmoothAPLoss",
    "pml.TripletMarginLoss",
]


@pytest.fixture(scope="module")
def digits() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(train inputs, train labels, test inputs, test labels): pixels in [0, 1] beside N(0, 0.25) noise."""
    data = load_digits()
    pixels = torch.tensor(data.data, dtype=torch.float32) / 16
    noise = 0.5 * torch.randn(len(pixels), 448, generator=torch.Generator().manual_seed(1))
    inputs, labels = torch.cat([pixels, noise], dim=1), torch.tensor(data.target)
    train = torch.arange(len(labels)) % 2 == 0
    return inputs[train], labels[train], inputs[~train], labels[~train]


def _recall_at_1(model: nn.Module, inputs: Tensor, labels: Tensor) -> float:
    with torch.no_grad():
        embeddings = nn.functional.normalize(model(inputs), dim=1).numpy()
    return per_query_scores(embeddings, labels.numpy(), (1,)).summary((1,))["recall@1"]


def _batches(loss: MetricLoss, labels: Tensor) -> list[Tensor]:
    """STEPS batches of 32: P x K (8 x 4) for pair losses, shuffled otherwise."""
    if not loss.needs_pk_batches:
        generator = torch.Generator().manual_seed(0)
        return [torch.randint(len(labels), (32,), generator=generator) for _ in range(STEPS)]
    batches: list[Tensor] = []
    for epoch in range(STEPS):
        batches.extend(torch.as_tensor(np.asarray(batch)) for batch in PKSampler(labels.numpy(), 8, 4, seed=epoch))
        if len(batches) >= STEPS:
            return batches[:STEPS]
    return batches


@pytest.mark.parametrize("name", [*sorted(LOSSES), *ADAPTERS])
def test_the_loss_moves_recall_well_above_an_untrained_network(name: str, digits) -> None:
    train_inputs, train_labels, test_inputs, test_labels = digits
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(train_inputs.shape[1], 64), nn.ReLU(), nn.Linear(64, EMBEDDING_DIM))
    untrained = _recall_at_1(model, test_inputs, test_labels)
    loss = build_loss(name, {}, num_classes=10, embedding_dim=EMBEDDING_DIM)
    targets = nn.functional.one_hot(train_labels, 10).bool() if loss.multi_label else train_labels
    optimizer = torch.optim.Adam([{"params": model.parameters()}, {"params": loss.parameters(), "lr": 1e-2}], lr=1e-3)
    for batch in _batches(loss, train_labels):
        optimizer.zero_grad()
        loss(model(train_inputs[batch]), targets[batch]).backward()
        optimizer.step()
    trained = _recall_at_1(model, test_inputs, test_labels)
    assert untrained < 0.2
    assert trained > untrained + 0.15, f"{name}: Recall@1 {untrained:.3f} untrained, {trained:.3f} after {STEPS} steps"
