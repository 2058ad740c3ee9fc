"""CrossBatchMemory: loss values and queue equal to pytorch-metric-learning's over several steps, gradients, config."""

from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from retrieval.config import load_config
from retrieval.errors import UserError
from retrieval.losses import CircleLoss, CrossBatchMemory, TripletLoss, build_loss, registry_name
from retrieval.losses.memory import EmbeddingQueue

DIM, MEMORY = 16, 40  # 40 is no multiple of the batch of 16: the ring wraps mid-batch on step 3


def _batches(steps: int, size: int = 16, classes: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` batches of raw embeddings (requiring grad) with labels of 4 classes x 4 images out of `classes`."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(steps):
        embeddings = (3 * torch.randn(size, DIM, generator=generator)).requires_grad_(True)
        chosen = torch.randperm(classes, generator=generator)[: size // 4]
        batches.append((embeddings, chosen.repeat_interleave(4)))
    return batches


PAIRS = {
    "circle": (lambda: CircleLoss(m=0.25, gamma=80.0), lambda: pml_losses.CircleLoss(m=0.25, gamma=80.0)),
    "triplet": (lambda: TripletLoss(margin=0.2, miner="all"), lambda: pml_losses.TripletMarginLoss(margin=0.2)),
}


@pytest.mark.parametrize("name", PAIRS)
def test_loss_values_and_queue_match_pml_over_steps(name: str) -> None:
    ours_factory, pml_factory = PAIRS[name]
    ours = CrossBatchMemory(ours_factory(), DIM, MEMORY)
    reference = pml_losses.CrossBatchMemory(pml_factory(), DIM, memory_size=MEMORY)
    for step, (embeddings, labels) in enumerate(_batches(6)):
        value = ours(embeddings, labels)
        expected = reference(embeddings, labels)
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6, msg=f"step {step}")
        torch.testing.assert_close(ours.queue.embeddings, reference.embedding_memory, rtol=0, atol=0)
        assert torch.equal(ours.queue.labels, reference.label_memory)
        assert ours.queue.position == reference.queue_idx
        assert (ours.queue.count == MEMORY) == reference.has_been_filled
    assert ours.last_stats["memory_filled"].item() == MEMORY


def test_gradient_flows_through_the_batch_and_its_own_references() -> None:
    """The gradient of PML's CircleLoss given references = [batch, live; earlier batches, detached]."""
    memory = CrossBatchMemory(CircleLoss(m=0.25, gamma=80.0), DIM, MEMORY)
    earlier, current = _batches(2)
    memory(*earlier)
    embeddings, labels = current
    (ours,) = torch.autograd.grad(memory(embeddings, labels), embeddings)

    references = torch.cat([embeddings, earlier[0].detach()])
    ref_labels = torch.cat([labels, earlier[1]])
    pairs = lmu.get_all_pairs_indices(labels, ref_labels)
    batch = torch.arange(len(labels))
    pairs = lmu.remove_self_comparisons(pairs, batch, len(ref_labels))
    pml = pml_losses.CircleLoss(m=0.25, gamma=80.0)(embeddings, labels, pairs, references, ref_labels)
    (expected,) = torch.autograd.grad(pml, embeddings)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", PAIRS)
def test_empty_memory_is_the_in_batch_loss_value_and_gradient(name: str) -> None:
    make = PAIRS[name][0]
    ((embeddings, labels),) = _batches(1)
    plain = make()(embeddings, labels)
    (plain_grad,) = torch.autograd.grad(plain, embeddings)
    wrapped = CrossBatchMemory(make(), DIM, MEMORY)(embeddings, labels)
    (wrapped_grad,) = torch.autograd.grad(wrapped, embeddings)
    torch.testing.assert_close(wrapped, plain, rtol=0, atol=0)
    torch.testing.assert_close(wrapped_grad, plain_grad, rtol=0, atol=0)


def test_queue_survives_a_state_dict_round_trip() -> None:
    batches = _batches(4)
    original = CrossBatchMemory(CircleLoss(), DIM, MEMORY)
    for embeddings, labels in batches[:3]:
        original(embeddings, labels)
    restored = CrossBatchMemory(CircleLoss(), DIM, MEMORY)
    restored.load_state_dict({name: tensor.clone() for name, tensor in original.state_dict().items()})
    assert restored.queue.position == original.queue.position and restored.queue.count == MEMORY
    torch.testing.assert_close(restored(*batches[3]), original(*batches[3]), rtol=0, atol=0)


def test_older_returns_entries_oldest_first_without_the_newest() -> None:
    queue = EmbeddingQueue(size=5, embedding_dim=1)
    for start in (0, 3):  # 3 entries, then 3 more: slots 0..4 hold 1, 2, 3, 4, 5 after wrapping, oldest 1
        values = torch.arange(start, start + 3, dtype=torch.float32)
        queue.enqueue(values[:, None], values.long())
    embeddings, labels = queue.older(skip_newest=3)
    assert labels.tolist() == [1, 2] and embeddings[:, 0].tolist() == [1.0, 2.0]
    assert queue.position == 1 and queue.count == 5


def test_a_batch_larger_than_the_memory_is_refused() -> None:
    ((embeddings, labels),) = _batches(1)
    with pytest.raises(ValueError, match="set loss.memory_size to at least the batch size"):
        CrossBatchMemory(CircleLoss(), DIM, memory_size=8)(embeddings, labels)


@pytest.mark.parametrize("name", PAIRS)
def test_build_loss_wraps_pair_losses_and_keeps_their_name(name: str) -> None:
    loss = build_loss(name, {"memory_size": 64}, num_classes=4, embedding_dim=DIM)
    assert isinstance(loss, CrossBatchMemory) and loss.memory_size == 64 and loss.needs_pk_batches
    assert registry_name(loss) == name and loss.proxies is None
    assert not isinstance(build_loss(name, {"memory_size": 0}, num_classes=4, embedding_dim=DIM), CrossBatchMemory)


def test_proxy_losses_refuse_a_memory() -> None:
    with pytest.raises(UserError, match="memory_size applies to pair losses"):
        build_loss("proxy_nca", {"memory_size": 64}, num_classes=4, embedding_dim=DIM)
    with pytest.raises(UserError, match="loss.memory_size"):
        load_config(None, ["loss.name=anchor", "loss.memory_size=64"])


def test_config_refuses_a_memory_smaller_than_a_batch() -> None:
    config = load_config(None, ["loss.name=circle", "loss.memory_size=256", "data.p=8", "data.k=4"])
    assert config.loss.params["memory_size"] == 256
    with pytest.raises(UserError, match=r"smaller than one batch \(data.p x data.k = 32\)"):
        load_config(None, ["loss.name=circle", "loss.memory_size=16", "data.p=8", "data.k=4"])
