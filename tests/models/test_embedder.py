"""The Embedder contract on tiny timm backbones: shapes, unit norm, gradients, weight loading, errors."""

import os
import subprocess
import sys

import pytest
import timm
import torch
from safetensors.torch import save_file

from retrieval.errors import UserError
from retrieval.models import Embedder, GlobalPool


@pytest.mark.parametrize("pooling", ["avg", "max", "avgmax", "gem"])
@pytest.mark.parametrize("backbone", ["resnet10t", "resnet18"])
def test_forward_gives_unit_vectors_and_every_parameter_a_gradient(backbone, pooling):
    torch.manual_seed(0)
    model = Embedder(backbone, embedding_dim=16, pooling=pooling)
    embeddings = model(torch.randn(3, 3, 32, 32))
    assert embeddings.shape == (3, 16) and embeddings.dtype == torch.float32
    torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(3))
    embeddings[:, 0].sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_a_token_backbone_works_too():
    model = Embedder("vit_tiny_patch16_224", embedding_dim=8, pooling="avg", in_chans=1)
    out = model(torch.randn(2, 1, 224, 224))
    assert out.shape == (2, 8) and torch.isfinite(out).all()


def test_avgmax_is_the_sum_of_average_and_max_pooling():
    features = torch.randn(2, 5, 4, 4)
    expected = features.mean(dim=(2, 3)) + features.amax(dim=(2, 3))
    torch.testing.assert_close(GlobalPool("avgmax")(features), expected)


def test_gem_with_p_one_is_average_pooling_of_positive_maps():
    features = torch.rand(2, 5, 4, 4) + 0.1
    pool = GlobalPool("gem")
    with torch.no_grad():
        pool.gem.p.fill_(1.0)
    torch.testing.assert_close(pool(features), features.mean(dim=(2, 3)))


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_local_weights_are_loaded_and_a_classifier_head_is_dropped(tmp_path, suffix):
    source = timm.create_model("resnet10t", num_classes=1000)  # with an ImageNet-style head
    state = {name: tensor.contiguous() for name, tensor in source.state_dict().items()}
    path = tmp_path / f"weights{suffix}"
    save_file(state, path) if suffix == ".safetensors" else torch.save(state, path)
    model = Embedder("resnet10t", embedding_dim=8, weights=str(path))
    loaded = model.backbone.state_dict()
    assert "fc.weight" not in loaded
    for name, tensor in loaded.items():
        torch.testing.assert_close(tensor, state[name], msg=name)


def test_unknown_backbone_suggests_close_names():
    with pytest.raises(UserError, match="unknown backbone 'resnet5O'.*did you mean.*resnet50"):
        Embedder("resnet5O")


def test_missing_weights_file_says_what_to_give(tmp_path):
    with pytest.raises(UserError, match="model.weights file not found"):
        Embedder("resnet10t", weights=str(tmp_path / "missing.safetensors"))


def test_pretrained_offline_without_weights_says_how_to_fix():
    code = "from retrieval.models import Embedder; Embedder('resnet10t', pretrained=True)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert "UserError: could not load pretrained weights for resnet10t" in result.stderr
    assert "set model.weights=PATH" in result.stderr
