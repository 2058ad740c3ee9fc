"""Training the pair model (`retrieval.reranker.training`): the frozen backbone's path, on features, in a second."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from retrieval.config import load_config
from retrieval.models import Embedder
from retrieval.models.pair_model import PairModel, Pooled
from retrieval.reranker.mining import mine_pairs
from retrieval.reranker.training import PairFeatures, train_pair_model


def test_the_frozen_path_trains_on_what_the_describer_projects():
    """`Pooled` features, computed once in build.py for `reranker.backbone: frozen`, are the projection's input."""
    torch.manual_seed(0)
    model = PairModel(Embedder("resnet10t", embedding_dim=8, pretrained=False), 16, 2, 3, 32).eval()
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.describe.projection(Pooled(model.describe)(images)), model.describe(images))


@pytest.mark.slow  # 16 epochs of a small MLP: seconds
def test_a_frozen_backbone_stays_as_it_is_while_the_head_learns_the_pairs(capsys):
    torch.manual_seed(0)
    model = PairModel(Embedder("resnet10t", embedding_dim=8, pretrained=False), 16, 2, 3, 32)
    width = model.describe.projection[0].in_features
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(8), 6)
    centres = rng.standard_normal((8, width)).astype(np.float32)
    features = centres[labels] + 0.8 * rng.standard_normal((len(labels), width)).astype(np.float32)
    embeddings = rng.standard_normal((len(labels), 4)).astype(np.float32)  # an embedding that knows nothing
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    pairs = mine_pairs(embeddings, labels, depth=12)
    backbone = {name: tensor.clone() for name, tensor in model.describe.embedder.state_dict().items()}
    settings = ["reranker.epochs=1", "reranker.batch_size=32", "reranker.lr=1e-2", "data.num_workers=0"]
    first = train_pair_model(model, PairFeatures(features, pairs), load_config(None, settings), torch.device("cpu"))
    later = train_pair_model(
        model, PairFeatures(features, pairs), load_config(None, [*settings, "reranker.epochs=15"]), torch.device("cpu")
    )
    assert later < 0.6 * first, (first, later)
    for name, tensor in model.describe.embedder.state_dict().items():
        assert torch.equal(tensor, backbone[name]), name  # weights and BatchNorm statistics
    assert "re-ranker epoch 15/15" in capsys.readouterr().out
