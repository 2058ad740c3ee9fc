"""The toolkit's AdamW takes the multi-tensor update and keeps the per-tensor loop's bits (runs reproduce)."""

from __future__ import annotations

import torch

from retrieval.config import TrainConfig
from retrieval.losses import build_loss
from retrieval.models import Embedder
from retrieval.train.builders import build_optimizer


def _weights_after_steps(optimizer_of, steps: int = 3) -> torch.Tensor:
    """The weights and proxies of a small embedder after `steps` AdamW steps on fixed random gradients."""
    torch.manual_seed(0)
    model = Embedder("resnet10t", embedding_dim=8, pretrained=False)
    loss = build_loss("proxy_nca", {}, 4, 8)
    optimizer = optimizer_of(model, loss)
    generator = torch.Generator().manual_seed(1)
    parameters = [*model.parameters(), *loss.parameters()]
    for _ in range(steps):
        for parameter in parameters:
            parameter.grad = torch.randn(parameter.shape, generator=generator)
        optimizer.step()
    return torch.cat([parameter.detach().flatten() for parameter in parameters])


def test_the_training_optimizer_is_the_per_tensor_adamw_bit_for_bit_on_the_multi_tensor_path():
    train = TrainConfig(lr=1e-3, weight_decay=1e-4, proxy_lr_mult=100.0)
    built = []

    def toolkit(model, loss):
        built.append(build_optimizer(model, loss, train))
        return built[-1]

    def per_tensor(model, loss):  # the same groups, on PyTorch's CPU default
        groups = build_optimizer(model, loss, train).param_groups
        return torch.optim.AdamW([{**group, "foreach": False} for group in groups])

    assert torch.equal(_weights_after_steps(toolkit), _weights_after_steps(per_tensor))
    assert all(group["foreach"] for group in built[0].param_groups)
