"""Balance-degree gating against docs/losses.md: b from a literal projection, the CT/MT weights, the warm-up."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from retrieval.losses import AnchorLoss, ProxyNCALoss
from retrieval.losses.functional import balance_degree, cosine_to_proxies, gate_weights
from tests.conftest import TINY_DIGITS

EPS = 1e-6


def _naive_balance_degree(embeddings, anchors, labels):
    """docs/losses.md literally, one sample at a time, float64: u = w_y/||w_y||, l = max(x.u, 0) u, e = x - l."""
    out = []
    for x, y in zip(embeddings.double(), labels, strict=True):
        x = x / x.norm()
        u = anchors[int(y)].double() / anchors[int(y)].double().norm()
        along = max(float(x @ u), 0.0) * u
        rest = x - along
        out.append(math.log((float(along @ along) + EPS) / (float(rest @ rest) + EPS)))
    return torch.tensor(out, dtype=torch.float64)


def _at_angle(angle: float) -> torch.Tensor:
    """A 2-D unit feature at `angle` radians from the anchor (1, 0)."""
    return torch.tensor([[math.cos(angle), math.sin(angle)]])


ANCHOR = torch.tensor([[1.0, 0.0]])
ZERO = torch.tensor([0])


def test_balance_degree_matches_the_literal_projection():
    gen = torch.Generator().manual_seed(0)
    embeddings, anchors = 3 * torch.randn(40, 16, generator=gen), torch.randn(5, 16, generator=gen)
    labels = torch.randint(5, (40,), generator=gen)
    torch.testing.assert_close(
        balance_degree(embeddings, anchors, labels).double(),
        _naive_balance_degree(embeddings, anchors, labels),
        rtol=1e-4,
        atol=1e-4,
    )


def test_balance_degree_is_log_cos2_over_sin2_and_zero_at_45_degrees():
    for angle in (0.3, math.pi / 4, 1.2):
        expected = math.log((math.cos(angle) ** 2 + EPS) / (math.sin(angle) ** 2 + EPS))
        assert balance_degree(_at_angle(angle), ANCHOR, ZERO).item() == pytest.approx(expected, abs=1e-5)
    assert balance_degree(_at_angle(math.pi / 4), ANCHOR, ZERO).item() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("mode", ["ct", "mt"])
def test_on_proxy_weight_zero_orthogonal_and_opposite_weight_one(mode):
    features = torch.cat([_at_angle(0.0), _at_angle(math.pi / 2), _at_angle(math.pi), _at_angle(2.5)])
    w = gate_weights(balance_degree(features, ANCHOR, ZERO.repeat(4)), tau=1.0, mode=mode)
    assert w.tolist() == [0.0, 1.0, 1.0, 1.0]  # 2.5 rad is anti-aligned: hardest, not safe


@pytest.mark.parametrize("mode", ["ct", "mt"])
@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_weight_is_monotone_in_the_angle_and_never_above_one(mode, tau):
    angles = torch.linspace(0.0, math.pi, 721)
    features = torch.stack([angles.cos(), angles.sin()], dim=1)
    w = gate_weights(balance_degree(features, ANCHOR, torch.zeros(721, dtype=torch.long)), tau=tau, mode=mode)
    assert torch.all(w[1:] >= w[:-1]) and w.max() <= 1.0 and w.min() >= 0.0
    assert w[0] == 0.0 and w[-1] == 1.0


def test_mt_falls_linearly_from_one_at_b_zero_to_zero_at_tau():
    b = torch.tensor([-3.0, 0.0, 0.25, 0.5, 1.0, 4.0])
    torch.testing.assert_close(gate_weights(b, tau=0.5, mode="mt"), torch.tensor([1.0, 1.0, 0.5, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(gate_weights(b, tau=0.5, mode="ct"), torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]))


def test_bad_gate_arguments_raise():
    with pytest.raises(ValueError, match="gate mode"):
        gate_weights(torch.zeros(2), 1.0, "soft")
    with pytest.raises(ValueError, match="tau"):
        gate_weights(torch.zeros(2), 0.0, "ct")
    with pytest.raises(ValueError, match="gate must be"):
        ProxyNCALoss(3, 4, gate="soft")


def _batch(seed=0, batch=32, dim=8, classes=4):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, dim, generator=gen), torch.randint(classes, (batch,), generator=gen)


@pytest.mark.parametrize("loss_cls", [ProxyNCALoss, AnchorLoss])
@pytest.mark.parametrize("mode", ["ct", "mt"])
def test_gated_loss_is_the_mean_over_all_samples_of_weighted_cross_entropy(loss_cls, mode):
    embeddings, labels = _batch()
    plain = loss_cls(4, 8)
    gated = loss_cls(4, 8, gate=mode, tau=0.5, gate_warmup_epochs=2)
    gated.proxies.data.copy_(plain.proxies.data)
    # Half the samples sit on their proxy so that some are gated whatever the random draw.
    embeddings[::2] = plain.proxies.data[labels[::2]] * 3
    plain(embeddings, labels)
    per_sample = F.cross_entropy(plain.last_stats["logits"], labels, reduction="none")
    gated.set_epoch(2)
    loss = gated(embeddings, labels)
    b = balance_degree(embeddings, gated.proxies, labels)
    w = gate_weights(b, 0.5, mode)
    assert 0 < (w == 0).sum() < len(w)
    torch.testing.assert_close(loss, (w * per_sample).sum() / len(w))  # gated samples stay in the denominator
    # On the proxy, 1 - cos^2 is float32 rounding noise and b only needs to be large.
    away = b < 8
    torch.testing.assert_close(gated.last_stats["b"][away], b[away], rtol=1e-4, atol=1e-4)
    assert torch.all(gated.last_stats["b"][~away] > 8)
    torch.testing.assert_close(gated.last_stats["w"], w)


@pytest.mark.parametrize("mode", ["ct", "mt"])
def test_no_gradient_flows_through_the_weight(mode):
    embeddings, labels = _batch(seed=1)
    gated = ProxyNCALoss(4, 8, gate=mode, gate_warmup_epochs=0)
    emb = embeddings.clone().requires_grad_()
    gated(emb, labels).backward()
    w = gated.last_stats["w"]
    assert not w.requires_grad
    # Reference: the per-sample cross-entropy weighted by the same constants.
    ref_emb = embeddings.clone().requires_grad_()
    logits = 16.0 * cosine_to_proxies(ref_emb, gated.proxies.detach())
    (w * F.cross_entropy(logits, labels, reduction="none")).mean().backward()
    torch.testing.assert_close(emb.grad, ref_emb.grad)


def test_gate_waits_for_its_warmup_epochs():
    embeddings, labels = _batch(seed=2)
    plain = ProxyNCALoss(4, 8)
    gated = ProxyNCALoss(4, 8, gate="ct", gate_warmup_epochs=3)
    gated.proxies.data.copy_(plain.proxies.data)
    embeddings[:8] = plain.proxies.data[labels[:8]]  # on their proxies: gated once active
    expected = plain(embeddings, labels)
    for epoch in range(3):
        gated.set_epoch(epoch)
        torch.testing.assert_close(gated(embeddings, labels), expected)
        assert torch.all(gated.last_stats["w"] == 1.0)
    per_sample = F.cross_entropy(plain.last_stats["logits"], labels, reduction="none")
    gated.set_epoch(3)
    loss = gated(embeddings, labels)
    assert torch.all(gated.last_stats["w"][:8] == 0.0)
    torch.testing.assert_close(loss, (gated.last_stats["w"] * per_sample).mean())


@pytest.mark.slow
def test_the_trainer_tells_the_loss_the_epoch_and_logs_b_and_w(tmp_path, csv_dataset, monkeypatch):
    from retrieval.config import load_config
    from retrieval.train.trainer import Trainer

    seen = []
    original = ProxyNCALoss.set_epoch
    monkeypatch.setattr(ProxyNCALoss, "set_epoch", lambda self, epoch: (seen.append(epoch), original(self, epoch)))
    tiny = [*TINY_DIGITS, "data.batch_size=8"]
    data = ["data.name=csv", f"data.path={csv_dataset}", "data.val_fraction=0"]
    gate = ["loss.name=proxy_nca", "loss.gate=ct", "loss.gate_warmup_epochs=1", "train.epochs=2", "train.eval_every=2"]
    trainer = Trainer.from_config(load_config(None, [*tiny, *data, *gate]), tmp_path / "run")
    trainer.fit()
    assert seen == [0, 1]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["w"]["min"] == 1.0  # warm-up epoch: nothing gated
    assert {"b", "w", "scale"} <= set(records[1]) and not {"logits", "labels"} & set(records[1])
