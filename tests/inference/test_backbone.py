"""A backbone without training: `model.embedding_dim: null`, its checkpoint, and the encoder an index rebuilds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.config import Config, ModelConfig, config_to_dict, load_config
from retrieval.errors import UserError
from retrieval.export.index_encoder import encoder_for_index
from retrieval.inference.backbone import backbone_checkpoint, backbone_config
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.models import Embedder


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """A resnet10t state dict with an ImageNet-style classifier, as a downloaded file would hold."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet10t.pth"
    torch.save(timm.create_model("resnet10t").state_dict(), path)
    return path


@pytest.mark.parametrize("pooling", ["avg", "avgmax"])
def test_no_head_gives_timms_pooled_features_normalized(weights: Path, pooling: str) -> None:
    model = Embedder("resnet10t", embedding_dim=None, pooling=pooling, weights=str(weights)).eval()
    reference = timm.create_model("resnet10t", num_classes=0).eval()
    reference.load_state_dict(model.backbone.state_dict())
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        embeddings = model(images)
        features = reference.forward_features(images)
        pooled = reference.forward_head(features, pre_logits=True) if pooling == "avg" else None
        if pooled is None:  # ours: the sum of average and max pooling
            pooled = features.mean(dim=(2, 3)) + features.amax(dim=(2, 3))
    assert model.embedding_dim == reference.num_features == embeddings.shape[1] == 512
    assert not list(model.head.parameters())
    torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(embeddings, F.normalize(pooled, dim=1), rtol=1e-5, atol=1e-6)


def test_config_accepts_null_and_the_checkpoint_knows_the_width(tmp_path: Path) -> None:
    config = load_config(None, ["model.backbone=resnet10t", "model.embedding_dim=null"])
    assert config.model.embedding_dim is None
    with pytest.raises(UserError, match="model.embedding_dim must be null or an integer >= 1"):
        load_config(None, ["model.embedding_dim=0"])
    checkpoint = backbone_checkpoint(config)
    checkpoint.save(tmp_path / "backbone.pt")
    loaded = Checkpoint.read(tmp_path / "backbone.pt")
    assert loaded.embedding_dim == 512 and loaded.model_config.embedding_dim is None
    assert loaded.embedder().embedding_dim == 512


def test_backbone_config_takes_the_weights_and_warns_when_untrained(weights: Path) -> None:
    demo = load_config(None)  # model.pretrained: false
    config = backbone_config(demo, "resnet10t", weights)
    assert config.model == demo.model.model_copy(
        update={"backbone": "resnet10t", "embedding_dim": None, "weights": str(weights)}
    )
    assert config.data == demo.data and config.augment == demo.augment
    with pytest.warns(UserWarning, match="untrained, random network"):
        backbone_config(demo, "resnet10t")


def test_checkpoint_holds_the_weights_file(weights: Path) -> None:
    config = backbone_config(load_config(None), "resnet10t", weights)
    model = backbone_checkpoint(config).embedder()
    state = torch.load(weights, weights_only=True)
    for name, tensor in model.backbone.state_dict().items():
        torch.testing.assert_close(tensor, state[name], msg=name)


def test_an_index_rebuilds_the_same_encoder_and_refuses_other_weights(weights: Path, tmp_path: Path) -> None:
    own_weights = tmp_path / "weights.pth"
    shutil.copy(weights, own_weights)
    config = Config(model=ModelConfig(backbone="resnet10t", pretrained=False))
    config.data.image_size = 32
    config = backbone_config(config, "resnet10t", own_weights)
    encoder = ImageEncoder.from_backbone(config, device="cpu")
    info = encoder.info().record()
    assert info["backbone_config"] == config_to_dict(config) and info["checkpoint"] is None
    assert info["embedding_dim"] == 512 and info["image_size"] == 32

    rebuilt = encoder_for_index(info, device="cpu")
    assert rebuilt.checkpoint_sha256 == encoder.checkpoint_sha256
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(2)]
    np.testing.assert_array_equal(rebuilt.embed_images(images), encoder.embed_images(images))

    with pytest.raises(UserError, match="leave out --checkpoint"):
        encoder_for_index(info, checkpoint=tmp_path / "best.pt", device="cpu")
    torch.manual_seed(1)
    torch.save(timm.create_model("resnet10t").state_dict(), own_weights)  # the file changed after the build
    with pytest.raises(UserError, match="not the ones this index was built with"):
        encoder_for_index(info, device="cpu")
