"""Class-weighted proxy losses: the weights' formulas and normalisation, and the loss vs a naive weighted CE."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from retrieval.config import load_config
from retrieval.errors import UserError
from retrieval.losses import build_loss
from retrieval.losses.class_weights import class_weights
from retrieval.losses.functional.proxy import cosine_to_proxies

COUNTS = np.array([50, 20, 5, 1])


def test_inverse_weights_are_one_over_count_with_mean_one() -> None:
    weights = class_weights(COUNTS, "inverse").double()
    expected = torch.tensor([1 / n for n in COUNTS.tolist()], dtype=torch.float64)
    torch.testing.assert_close(weights, expected * len(COUNTS) / expected.sum(), rtol=1e-6, atol=0)
    assert weights.mean().item() == pytest.approx(1.0)


@pytest.mark.parametrize("beta", [0.0, 0.9, 0.999, 0.99999])
def test_effective_number_weights_follow_cui_et_al(beta: float) -> None:
    weights = class_weights(COUNTS, "effective_number", beta).double()
    effective = [(1 - beta**n) / (1 - beta) if beta else 1.0 for n in COUNTS.tolist()]
    raw = torch.tensor([1 / e for e in effective], dtype=torch.float64)
    torch.testing.assert_close(weights, raw / raw.mean(), rtol=1e-5, atol=0)
    assert weights.mean().item() == pytest.approx(1.0)


def test_balanced_counts_give_ones_and_bad_arguments_raise() -> None:
    torch.testing.assert_close(class_weights(np.full(5, 7), "inverse"), torch.ones(5))
    assert class_weights(COUNTS, "none") is None
    for args, match in (((COUNTS, "square"), "one of"), ((COUNTS, "inverse", 1.0), "beta"), (([3, 0], "inverse"), "1")):
        with pytest.raises(ValueError, match=match):
            class_weights(*args)


@pytest.mark.parametrize("name", ["proxy_nca", "anchor"])
@pytest.mark.parametrize("mode", ["inverse", "effective_number"])
def test_weighted_loss_equals_naive_weighted_cross_entropy(name: str, mode: str) -> None:
    torch.manual_seed(0)
    loss = build_loss(name, {"class_weights": mode, "beta": 0.99}, 4, 8, class_counts=COUNTS)
    plain = build_loss(name, {}, 4, 8)
    plain.load_state_dict({"proxies": loss.proxies.detach()}, strict=False)
    embeddings = torch.randn(10, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 3, 0, 0, 1, 3, 3, 2])
    weighted = loss(embeddings, labels)
    # Reference: the same logits through a per-sample loop, each CE times its class's weight, over B.
    scale = loss.last_stats["scale"].double()
    cosine = cosine_to_proxies(embeddings, loss.proxies).double()
    margin = 0.35 if name == "anchor" else 0.0  # the Anchor Loss's default target margin
    logits = scale[:, None] * (cosine - margin * F.one_hot(labels, 4).double())
    weights = class_weights(COUNTS, mode, 0.99).double()
    terms = [weights[y] * F.cross_entropy(logits[i : i + 1], labels[i : i + 1]) for i, y in enumerate(labels.tolist())]
    expected = torch.stack(terms).sum() / len(labels)
    torch.testing.assert_close(weighted.double(), expected, rtol=1e-5, atol=1e-6)
    # torch's own weighted CE with a sum reduction, divided by the batch size, agrees too.
    torch.testing.assert_close(
        weighted.double(),
        F.cross_entropy(logits, labels, weight=weights, reduction="sum") / len(labels),
        rtol=1e-5,
        atol=1e-6,
    )
    # and the gradient of the weighted loss differs from the plain loss's.
    (grad_weighted,) = torch.autograd.grad(weighted, embeddings)
    (grad_plain,) = torch.autograd.grad(plain(embeddings, labels), embeddings)
    assert not torch.allclose(grad_weighted, grad_plain)


def test_config_accepts_class_weights_for_proxy_losses_only() -> None:
    config = load_config(None, ["loss.class_weights=effective_number", "loss.beta=0.99"])
    assert config.loss.params["class_weights"] == "effective_number" and config.loss.params["beta"] == 0.99
    with pytest.raises(UserError, match="unknown config key loss.class_weights"):
        load_config(None, ["loss.name=triplet", "loss.class_weights=inverse"])
    with pytest.raises(UserError, match="class_weights must be one of"):
        build_loss("anchor", {"class_weights": "sqrt"}, 4, 8, class_counts=COUNTS)
