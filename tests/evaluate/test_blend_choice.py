"""Choosing a learned re-ranker's blend on validation (`choose_blend`): the best MAP@R, kept only when its gain is
clear of noise (`reranker.require_clear_gain`), and the one line that says so."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from retrieval.config import RerankerConfig
from retrieval.core.learned_rerank import MANIFEST_FILE, RerankerManifest
from retrieval.core.rerank import DatabaseAugmentation
from retrieval.data import EvalSplit
from retrieval.evaluate.evaluator import score_split
from retrieval.evaluate.learned_rerank import choose_blend, split_reranker
from retrieval.models.pair_model import PairHead

CLASSES, PER_CLASS = 20, 4


def _noisy_split() -> tuple[np.ndarray, EvalSplit, np.ndarray]:
    """Embeddings of 20 classes of 4 images, noisy enough that many nearest neighbours are of another class."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(CLASSES), PER_CLASS)
    centres = rng.standard_normal((CLASSES, 8))
    embeddings = (centres[labels] + 1.2 * rng.standard_normal((len(labels), 8))).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return embeddings, EvalSplit(dataset=None, labels=labels), labels  # type: ignore[arg-type]


def _oracle_head() -> PairHead:
    """A head over one-hot class descriptors: logit +22 for two images of one class, -20 otherwise."""
    head = PairHead(CLASSES)
    with torch.no_grad():
        for layer in (head.mlp[0], head.mlp[2]):
            layer.weight.zero_()
            layer.bias.zero_()
        head.mlp[0].weight[0, :CLASSES] = 1.0  # sum of q * r: 1 for one class, 0 for two
        head.mlp[2].weight[0, 0] = 50.0
        head.mlp[2].bias.fill_(-20.0)
    return head


def _descriptors(labels: np.ndarray, known: np.ndarray) -> np.ndarray:
    """One-hot class descriptors for the images of the `known` classes, zeros (no opinion) for the others."""
    descriptors = np.eye(CLASSES, dtype=np.float32)[labels]
    descriptors[~np.isin(labels, known)] = 0.0
    return descriptors


def test_a_re_ranker_that_knows_every_class_is_applied_with_its_gain_clear_of_zero():
    embeddings, split, labels = _noisy_split()
    choice = choose_blend(_oracle_head(), embeddings, _descriptors(labels, np.arange(CLASSES)), split, RerankerConfig())
    assert choice.blend.weight > 0 and choice.metrics["map@r"] > choice.without["map@r"]
    assert choice.gain is not None and 0 < choice.gain.low <= choice.gain.estimate <= choice.gain.high
    assert choice.gain.estimate == pytest.approx(choice.metrics["map@r"] - choice.without["map@r"])


def test_a_gain_on_one_class_of_twenty_is_not_clear_of_zero_and_the_embedding_alone_is_kept():
    embeddings, split, labels = _noisy_split()
    descriptors = _descriptors(labels, np.array([3]))
    choice = choose_blend(_oracle_head(), embeddings, descriptors, split, RerankerConfig())
    best_tried = max(row["map@r"] for row in choice.grid if row["weight"] > 0)
    assert best_tried > choice.without["map@r"]  # a blend did score higher on validation ...
    assert choice.gain is not None and choice.gain.low <= 0 < choice.gain.estimate  # ... by noise
    assert choice.blend.weight == 0 and choice.metrics == choice.without
    trusting = RerankerConfig(require_clear_gain=False)
    taken = choose_blend(_oracle_head(), embeddings, descriptors, split, trusting)
    assert taken.blend.weight > 0 and taken.metrics["map@r"] == best_tried and taken.gain == choice.gain


def test_over_a_base_every_blend_re_scores_the_augmented_gallery_and_the_embedding_alone_is_still_the_bar():
    embeddings, split, labels = _noisy_split()
    descriptors = _descriptors(labels, np.arange(CLASSES)[::2])  # half the classes known: the order matters
    base = DatabaseAugmentation(k=3, alpha=0.0)
    over = choose_blend(_oracle_head(), embeddings, descriptors, split, RerankerConfig(require_clear_gain=False), base)
    plain = choose_blend(_oracle_head(), embeddings, descriptors, split, RerankerConfig(require_clear_gain=False))
    assert over.without == plain.without == score_split(embeddings, split)[0]  # the bar: the embedding alone
    reranker = split_reranker(over.blend, _oracle_head(), embeddings, descriptors, split, base=base)
    np.testing.assert_array_equal(reranker.database(embeddings), base.database(embeddings))
    assert score_split(embeddings, split, rerank=reranker)[0] == over.metrics  # the choice is what it scores
    blended = {(row["depth"], row["weight"]): row["map@r"] for row in over.grid if row["weight"] > 0}
    assert blended != {(row["depth"], row["weight"]): row["map@r"] for row in plain.grid if row["weight"] > 0}


def test_where_no_blend_scores_higher_there_is_no_gain_to_record():
    embeddings, split, labels = _noisy_split()
    nothing = np.zeros((len(labels), CLASSES), np.float32)  # every pair alike: no blend changes an order
    choice = choose_blend(_oracle_head(), embeddings, nothing, split, RerankerConfig())
    assert choice.blend.weight == 0 and choice.gain is None


@pytest.mark.slow
def test_the_verdict_gives_the_gain_and_says_when_it_is_not_clear_of_zero(tiny_reranker):
    record = json.loads((tiny_reranker[2] / MANIFEST_FILE).read_text())
    record["validation"]["gain"] = [0.0125, 0.0031, 0.0220]
    applied = RerankerManifest.model_validate({**record, "depth": 10, "weight": 0.5})
    queries = record["validation"]["queries"]
    assert applied.verdict().endswith(f"alone ({queries} queries, a gain of +0.0125 [+0.0031, +0.0220])")
    record["validation"]["gain"] = [0.0040, -0.0010, 0.0100]
    refused = RerankerManifest.model_validate({**record, "weight": 0.0})
    assert "a gain of +0.0040 [-0.0010, +0.0100] that is not clear of 0;" in refused.verdict()
    assert refused.verdict().endswith("it will not be applied")
    del record["validation"]["gain"]  # a manifest written before the gain was recorded still reads
    assert RerankerManifest.model_validate(record).validation.gain is None
