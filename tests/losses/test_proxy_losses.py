"""Proxy-NCA and Anchor Loss against pytorch-metric-learning and naive loops over docs/losses.md's formulas."""

import math

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.losses import ProxyNCALoss as PMLProxyNCALoss

from retrieval.losses import AnchorLoss, ProxyNCALoss
from retrieval.losses.functional import cosine_to_proxies, semantic_difficulty
from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import FixedScale


def _batch(batch: int, dim: int, num_classes: int, seed: int = 0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(batch, dim, generator=gen, dtype=dtype)
    labels = torch.randint(0, num_classes, (batch,), generator=gen)
    return embeddings, labels


def _naive_difficulty(cosine: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """c_i = 1 + ||v_i|| / sqrt(K-1), v_i = ReLU(cos_ij) over j != y_i, one sample at a time."""
    num_classes = cosine.shape[1]
    out = []
    for i in range(cosine.shape[0]):
        if num_classes == 1:
            out.append(1.0)
            continue
        squares = sum(max(float(cosine[i, j]), 0.0) ** 2 for j in range(num_classes) if j != int(labels[i]))
        out.append(1.0 + math.sqrt(squares) / math.sqrt(num_classes - 1))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("scale", [1.0, 16.0, 32.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_proxy_nca_matches_pytorch_metric_learning(scale, dtype):
    embeddings, labels = _batch(48, 16, 10, dtype=dtype)
    ours = ProxyNCALoss(10, 16, scale=scale).to(dtype)
    ref = PMLProxyNCALoss(10, 16, distance=CosineSimilarity(), softmax_scale=scale).to(dtype)
    ref.proxies.data.copy_(ours.proxies.data)
    emb_ours = embeddings.clone().requires_grad_()
    emb_ref = embeddings.clone().requires_grad_()
    loss_ours = ours(emb_ours, labels)
    loss_ref = ref(emb_ref, labels)
    loss_ours.backward()
    loss_ref.backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-6  # our logits are float32 by contract
    torch.testing.assert_close(loss_ours.double(), loss_ref.double(), rtol=tol, atol=tol)
    torch.testing.assert_close(emb_ours.grad, emb_ref.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(ours.proxies.grad, ref.proxies.grad, rtol=tol, atol=tol)


def test_scale_2_is_pml_default_squared_distance_softmax():
    """PML's ProxyNCALoss default, softmax over -||x - p||^2 of unit vectors = 2 cos - 2, is cosine scale 2."""
    embeddings, labels = _batch(48, 16, 10, dtype=torch.float64)
    ours = ProxyNCALoss(10, 16, scale=2.0).double()
    ref = PMLProxyNCALoss(10, 16).double()  # LpDistance(power=2) on normalized vectors, softmax_scale 1
    ref.proxies.data.copy_(ours.proxies.data)
    emb_ours, emb_ref = embeddings.clone().requires_grad_(), embeddings.clone().requires_grad_()
    loss_ours, loss_ref = ours(emb_ours, labels), ref(emb_ref, labels)
    loss_ours.backward()
    loss_ref.backward()
    torch.testing.assert_close(loss_ours.double(), loss_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(emb_ours.grad, emb_ref.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours.proxies.grad, ref.proxies.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_classes", [1, 2, 7, 100])
def test_semantic_difficulty_matches_naive_loop(num_classes):
    embeddings, labels = _batch(20, 8, num_classes, seed=num_classes)
    proxies = torch.randn(num_classes, 8, generator=torch.Generator().manual_seed(1))
    cosine = cosine_to_proxies(embeddings, proxies)
    expected = _naive_difficulty(cosine, labels)
    torch.testing.assert_close(semantic_difficulty(cosine, labels).double(), expected, rtol=1e-6, atol=1e-6)


def test_semantic_difficulty_masks_target_and_clips_negatives():
    # Row 0: target cosine 0.9 (ignored), others -0.5 (clipped) -> c = 1.
    # Row 1: one other class at cosine 0.6 out of K - 1 = 3 -> c = 1 + 0.6 / sqrt(3).
    cosine = torch.tensor([[0.9, -0.5, -0.5, -0.5], [0.0, 0.6, -1.0, 0.2]])
    labels = torch.tensor([0, 3])
    expected = torch.tensor([1.0, 1.0 + 0.6 / math.sqrt(3)])
    torch.testing.assert_close(semantic_difficulty(cosine, labels), expected)


def test_anchor_with_unit_difficulty_equals_proxy_nca():
    # Orthonormal proxies, and embeddings positive only along their own class axis: every
    # non-target cosine is <= 0, so every c_i = 1 and the spec's Anchor Loss (no margin) must equal
    # Proxy-NCA(scale=gamma).
    num_classes, gamma = 6, 16.0
    gen = torch.Generator().manual_seed(3)
    labels = torch.arange(num_classes).repeat(3)
    embeddings = -torch.rand(len(labels), num_classes, generator=gen)
    embeddings[torch.arange(len(labels)), labels] = torch.rand(len(labels), generator=gen) + 0.1
    anchor = AnchorLoss(num_classes, num_classes, gamma=gamma, margin=0.0)
    nca = ProxyNCALoss(num_classes, num_classes, scale=gamma)
    with torch.no_grad():
        anchor.proxies.copy_(torch.eye(num_classes))
        nca.proxies.copy_(torch.eye(num_classes))
    emb_a = embeddings.clone().requires_grad_()
    emb_n = embeddings.clone().requires_grad_()
    loss_a, loss_n = anchor(emb_a, labels), nca(emb_n, labels)
    loss_a.backward()
    loss_n.backward()
    torch.testing.assert_close(anchor.last_stats["c"], torch.ones(len(labels)))
    torch.testing.assert_close(loss_a, loss_n)
    torch.testing.assert_close(emb_a.grad, emb_n.grad)
    torch.testing.assert_close(anchor.proxies.grad, nca.proxies.grad)


@pytest.mark.parametrize("margin", [0.35, 0.0])  # the default form, and the spec's
def test_anchor_loss_matches_naive_formula(margin):
    embeddings, labels = _batch(32, 12, 9, seed=5)
    loss_fn = AnchorLoss(9, 12, gamma=16.0) if margin == 0.35 else AnchorLoss(9, 12, gamma=16.0, margin=margin)
    loss = loss_fn(embeddings, labels)
    cosine = F.normalize(embeddings.double(), dim=1) @ F.normalize(loss_fn.proxies.detach().double(), dim=1).T
    difficulty = _naive_difficulty(cosine, labels)  # from the cosines before the margin
    total = 0.0
    for i in range(len(labels)):
        target = torch.zeros(9, dtype=torch.float64)
        target[labels[i]] = margin
        logits = 16.0 * difficulty[i] * (cosine[i] - target)
        total += float(torch.logsumexp(logits, 0) - logits[labels[i]])
    assert loss.item() == pytest.approx(total / len(labels), rel=1e-5)
    torch.testing.assert_close(loss_fn.last_stats["scale"].double(), 16.0 * difficulty, rtol=1e-5, atol=1e-5)


def test_max_difficulty_and_margin_match_naive_formula():
    # difficulty="max": c_i = 1 + the largest clipped cosine to another class; margin m lowers the
    # target cosine before the per-sample scale multiplies it (the scale sees the raw cosines).
    embeddings, labels = _batch(24, 12, 7, seed=11)
    loss_fn = AnchorLoss(7, 12, gamma=32.0, difficulty="max", margin=0.1)
    loss = loss_fn(embeddings, labels)
    cosine = F.normalize(embeddings.double(), dim=1) @ F.normalize(loss_fn.proxies.detach().double(), dim=1).T
    total = 0.0
    for i in range(len(labels)):
        target = int(labels[i])
        others = [max(float(cosine[i, j]), 0.0) for j in range(7) if j != target]
        scale = 32.0 * (1.0 + max(others))
        logits = [scale * (float(cosine[i, j]) - (0.1 if j == target else 0.0)) for j in range(7)]
        total += math.log(sum(math.exp(v) for v in logits)) - logits[target]
    assert loss.item() == pytest.approx(total / len(labels), rel=1e-5)


def test_unknown_difficulty_is_rejected():
    with pytest.raises(ValueError, match="difficulty must be one of norm, max"):
        AnchorLoss(3, 4, difficulty="mean")


@pytest.mark.parametrize("detach_scale", [True, False])
def test_single_class_gives_unit_difficulty_and_finite_gradients(detach_scale):
    embeddings, labels = _batch(8, 4, 1)
    embeddings.requires_grad_()
    loss_fn = AnchorLoss(1, 4, detach_scale=detach_scale)
    loss = loss_fn(embeddings, labels)
    loss.backward()
    assert torch.equal(loss_fn.last_stats["c"], torch.ones(8))
    assert torch.isfinite(loss) and loss.item() == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(embeddings.grad).all() and torch.isfinite(loss_fn.proxies.grad).all()


def test_detach_scale_stops_the_gradient_through_the_scale():
    embeddings, labels = _batch(16, 8, 5, seed=7)
    detached, attached = AnchorLoss(5, 8, detach_scale=True), AnchorLoss(5, 8, detach_scale=False)
    attached.load_state_dict(detached.state_dict())

    def grad_of(loss_fn):
        emb = embeddings.clone().requires_grad_()
        loss_fn(emb, labels).backward()
        return emb.grad

    # Reference for the detached case: the scale computed as a constant, outside autograd.
    emb = embeddings.clone().requires_grad_()
    cosine = cosine_to_proxies(emb, detached.proxies)
    with torch.no_grad():
        scale = 16.0 * semantic_difficulty(cosine, labels)
    target_margin = 0.35 * F.one_hot(labels, 5)  # the default margin, on the target cosine only
    F.cross_entropy(scale[:, None] * (cosine - target_margin), labels).backward()

    torch.testing.assert_close(grad_of(detached), emb.grad)
    assert not torch.allclose(grad_of(attached), emb.grad, atol=1e-6)


@pytest.mark.parametrize("loss_cls", [ProxyNCALoss, AnchorLoss])
def test_logits_stay_float32_under_bf16_autocast(loss_cls):
    embeddings, labels = _batch(16, 32, 10, seed=11)
    loss_fn = loss_cls(10, 32)
    rounded = embeddings.bfloat16()
    # float32 reference from the same bf16-rounded inputs: only the logits' precision can differ.
    reference_cosine = F.normalize(rounded.float(), dim=1) @ F.normalize(loss_fn.proxies.float(), dim=1).T
    reference = loss_fn(rounded.float(), labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cosine = cosine_to_proxies(rounded, loss_fn.proxies)
        loss = loss_fn(rounded, labels)
    assert cosine.dtype == torch.float32 and loss.dtype == torch.float32
    # bf16 cosines would be off by ~1e-3; float32 ones agree to float32 rounding.
    torch.testing.assert_close(cosine, reference_cosine, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=1e-6)


def test_a_margin_plugs_into_the_proxy_softmax_mechanism():
    # CosFace-style target margin supplied as a piece: the mechanism must apply it before scaling.
    def cosface(cosine, labels):
        return cosine - 0.35 * F.one_hot(labels, cosine.shape[1]).to(cosine.dtype)

    embeddings, labels = _batch(16, 8, 4, seed=13)
    loss_fn = ProxySoftmaxLoss(4, 8, scale=FixedScale(30.0), margin=cosface)
    cosine = cosine_to_proxies(embeddings, loss_fn.proxies)
    expected = F.cross_entropy(30.0 * cosface(cosine, labels), labels)
    torch.testing.assert_close(loss_fn(embeddings, labels), expected)


def test_labels_outside_the_proxy_range_are_rejected():
    embeddings, _ = _batch(4, 8, 3)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        ProxyNCALoss(3, 8)(embeddings, torch.tensor([0, 1, 2, 3]))


@pytest.mark.parametrize("loss_cls", [ProxyNCALoss, AnchorLoss])
def test_last_stats_hold_the_detached_float32_logits_and_labels(loss_cls):
    embeddings, labels = _batch(12, 8, 5, seed=17)
    loss_fn = loss_cls(5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(embeddings.bfloat16(), labels)
    logits = loss_fn.last_stats["logits"]
    assert logits.dtype == torch.float32 and logits.shape == (12, 5) and not logits.requires_grad
    assert torch.equal(loss_fn.last_stats["labels"], labels)
    torch.testing.assert_close(F.cross_entropy(logits, labels), loss.detach())
