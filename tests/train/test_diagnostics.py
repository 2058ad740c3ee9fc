"""Training diagnostics against naive references: autograd for the logit gradient, loops for the buckets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrieval.losses import build_loss
from retrieval.train.diagnostics import B_RANGE, HIST_BINS, P_T_EDGES, EpochDiagnostics, logit_gradient_norms


@pytest.mark.parametrize("weighted", [False, True])
def test_gradient_norms_equal_autograd_at_the_logits(weighted):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(12, 7, generator=generator) * 5).requires_grad_()
    labels = torch.randint(0, 7, (12,), generator=generator)
    weights = torch.rand(12, generator=generator) if weighted else None
    per_sample = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    loss = (per_sample if weights is None else per_sample * weights).mean()  # the mechanism's weighted mean
    (gradient,) = torch.autograd.grad(loss, logits)
    norms, p_t = logit_gradient_norms(logits, labels, weights)
    torch.testing.assert_close(norms, gradient.norm(dim=1), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(p_t, torch.softmax(logits.detach(), 1)[torch.arange(12), labels])


def _naive_bucket(p: float) -> int:
    for bucket, edge in enumerate(P_T_EDGES):
        if p < edge:
            return bucket
    return len(P_T_EDGES)


def _steps(seed: int, num_classes: int = 6):
    generator = torch.Generator().manual_seed(seed)
    for batch in (9, 5, 8):
        logits = torch.randn(batch, num_classes, generator=generator) * 4
        logits[0] = torch.tensor([50.0] + [0.0] * (num_classes - 1))  # p_t exactly 1 for label 0: last bucket
        labels = torch.randint(0, num_classes, (batch,), generator=generator)
        labels[0] = 0
        b = torch.randn(batch, generator=generator) * 3
        w = torch.where(torch.rand(batch, generator=generator) < 0.3, torch.zeros(batch), torch.rand(batch))
        w[1] = 1.0
        yield {"logits": logits, "labels": labels, "c": 1 + torch.rand(batch, generator=generator), "b": b, "w": w}


def test_epoch_summary_matches_a_naive_loop():
    class_groups = torch.tensor([0, 0, 1, 1, 2, 2])
    diagnostics = EpochDiagnostics(class_groups)
    steps = list(_steps(0))
    for stats in steps:
        diagnostics.update(stats)
    summary = diagnostics.summary().model_dump(exclude_none=True)  # as metrics.jsonl holds it

    bucket_sums, bucket_counts, split_sums = np.zeros(5), np.zeros(5, int), {"correct": 0.0, "wrong": 0.0}
    for stats in steps:  # one sample at a time, from the formula
        batch = len(stats["labels"])
        for z, y, w in zip(stats["logits"], stats["labels"], stats["w"], strict=True):
            p = torch.softmax(z.double(), 0)
            onehot = torch.zeros_like(p)
            onehot[y] = 1
            norm = float(w) * float((p - onehot).norm()) / batch
            bucket = _naive_bucket(float(p[y]))
            bucket_sums[bucket] += norm
            bucket_counts[bucket] += 1
            split_sums["correct" if int(z.argmax()) == int(y) else "wrong"] += norm
    grad = summary["grad"]
    np.testing.assert_allclose(grad["p_t_sum"], bucket_sums, rtol=1e-5)
    assert len(grad["p_t_buckets"]) == len(grad["p_t_sum"])  # the plots' labels travel with the sums
    assert grad["p_t_count"] == bucket_counts.tolist() and bucket_counts[-1] >= 3
    assert grad["correct_sum"] == pytest.approx(split_sums["correct"], rel=1e-5)
    assert grad["wrong_sum"] == pytest.approx(split_sums["wrong"], rel=1e-5)
    assert grad["correct_count"] + grad["wrong_count"] == sum(len(s["labels"]) for s in steps)

    c = torch.cat([s["c"] for s in steps]).numpy()
    expected = dict(zip(["min", "p10", "median", "p90", "max"], np.quantile(c, [0, 0.1, 0.5, 0.9, 1]), strict=True))
    for key, value in expected.items():
        assert summary["c"][key] == pytest.approx(value, rel=1e-6)
    assert sum(summary["c_hist"]["counts"]) == len(c) and len(summary["c_hist"]["counts"]) == HIST_BINS

    b = torch.cat([s["b"] for s in steps]).numpy()
    groups = class_groups[torch.cat([s["labels"] for s in steps])].numpy()
    for group, name in enumerate(["head", "mid", "tail"]):
        assert summary["b_median"][name] == pytest.approx(float(np.median(b[groups == group])), rel=1e-6)
    counts, _ = np.histogram(np.clip(b, *B_RANGE), bins=HIST_BINS, range=B_RANGE)
    assert summary["b_hist"]["counts"] == counts.tolist()

    w = torch.cat([s["w"] for s in steps]).numpy()
    assert summary["gating"]["fraction_gated"] == pytest.approx(float(np.mean(w < 1)))
    assert summary["gating"]["fraction_zero"] == pytest.approx(float(np.mean(w == 0)))
    assert 0 < summary["gating"]["fraction_zero"] < summary["gating"]["fraction_gated"] < 1


def test_proxy_loss_stats_drive_the_diagnostics_and_nothing_is_computed_without_them():
    loss_fn = build_loss("anchor", {}, num_classes=5, embedding_dim=8)
    embeddings, labels = torch.randn(10, 8), torch.arange(10) % 5
    loss_fn(embeddings, labels)
    stats = loss_fn.last_stats
    assert stats["logits"].shape == (10, 5) and stats["logits"].dtype == torch.float32
    assert not stats["logits"].requires_grad and torch.equal(stats["labels"], labels)
    diagnostics = EpochDiagnostics()
    diagnostics.update(stats)
    summary = diagnostics.summary().model_dump(exclude_none=True)
    assert {"scale", "c", "c_hist", "grad"} <= set(summary) and "logits" not in summary and "b_median" not in summary
    assert (
        EpochDiagnostics().summary().model_dump(exclude_none=True) == {}
    )  # a pair loss has no last_stats: an empty record
