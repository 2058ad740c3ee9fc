"""The Embedder contract on tiny timm backbones: shapes, unit norm, gradients, weight loading, errors."""

import os
import subprocess
import sys

import pytest
import timm
import torch
import torch.nn.functional as F
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


@pytest.fixture(scope="module")
def vit_inputs():
    torch.manual_seed(0)
    return torch.randn(2, 1, 160, 160)


def _vit(pooling: str) -> Embedder:
    torch.manual_seed(0)
    return Embedder("test_vit", embedding_dim=8, pooling=pooling, in_chans=1).eval()


@torch.no_grad()
def test_vit_avg_pools_the_patch_tokens_only(vit_inputs, monkeypatch):
    """timm's `avg` for a ViT: the mean of the patch tokens, then its fc_norm; the class token is left out."""
    model = _vit("avg")
    tokens = model.backbone.forward_features(vit_inputs)  # (B, 1 + N, C), class token first
    assert model.backbone.num_prefix_tokens == 1
    reference = F.normalize(model.head(model.backbone.fc_norm(tokens[:, 1:].mean(dim=1))), dim=1)
    embeddings = model(vit_inputs)
    torch.testing.assert_close(embeddings, reference)

    # Another class token and shuffled patch tokens (same mean): the same embedding.
    changed = torch.cat([torch.randn_like(tokens[:, :1]) * 10, tokens[:, 1:].flip(1)], dim=1)
    monkeypatch.setattr(model.backbone, "forward_features", lambda images: changed)
    torch.testing.assert_close(model(vit_inputs), embeddings)


@torch.no_grad()
def test_vit_token_pooling_is_the_class_token(vit_inputs, monkeypatch):
    model = _vit("token")
    tokens = model.backbone.forward_features(vit_inputs)
    embeddings = model(vit_inputs)
    torch.testing.assert_close(embeddings, F.normalize(model.head(tokens[:, 0]), dim=1))
    # Patch tokens do not matter, the class token does.
    monkeypatch.setattr(
        model.backbone, "forward_features", lambda images: torch.cat([tokens[:, :1], -tokens[:, 1:]], 1)
    )
    torch.testing.assert_close(model(vit_inputs), embeddings)


@torch.no_grad()
@pytest.mark.parametrize(("pooling", "reduce"), [("avg", torch.mean), ("max", torch.amax)])
def test_cnn_timm_poolings_reduce_the_feature_map(pooling, reduce):
    torch.manual_seed(0)
    model = Embedder("resnet10t", embedding_dim=8, pooling=pooling).eval()
    images = torch.randn(2, 3, 32, 32)
    features = model.backbone.forward_features(images)  # (B, C, H, W)
    reference = F.normalize(model.head(reduce(features, dim=(2, 3))), dim=1)
    torch.testing.assert_close(model(images), reference)


@pytest.mark.parametrize("pooling", ["avgmax", "gem"])
def test_feature_map_poolings_on_a_token_backbone_say_what_to_use(pooling):
    tokens = torch.randn(2, 101, 64)  # what test_vit's forward_features gives
    with pytest.raises(UserError, match=f"model.pooling={pooling} pools CNN feature maps.*use model.pooling=avg"):
        _vit(pooling).pool_features(tokens)


def test_token_pooling_on_a_cnn_is_a_user_error():
    with pytest.raises(UserError, match="timm cannot build resnet10t with pooling 'token'"):
        Embedder("resnet10t", pooling="token")


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


@pytest.mark.parametrize(("output_stride", "side"), [(None, 1), (32, 1), (16, 2), (8, 4)])
def test_output_stride_keeps_bigger_maps_with_the_same_weights(output_stride, side):
    """timm's dilation: a 32 px image keeps a side x side map, and the parameters are unchanged."""
    torch.manual_seed(0)
    model = Embedder("resnet10t", embedding_dim=8, in_chans=1, output_stride=output_stride).eval()
    assert model.backbone.forward_features(torch.randn(2, 1, 32, 32)).shape[-2:] == (side, side)
    assert model.state_dict().keys() == Embedder("resnet10t", embedding_dim=8, in_chans=1).state_dict().keys()


def test_flip_average_embeds_an_image_and_its_mirror_alike_in_eval_mode_only():
    """Eval: the unit mean of the plain model's embeddings of x and of mirrored x; training: x alone."""
    torch.manual_seed(0)
    plain = Embedder("resnet10t", embedding_dim=8, in_chans=1)
    averaged = Embedder("resnet10t", embedding_dim=8, in_chans=1, flip_average=True)
    averaged.load_state_dict(plain.state_dict())
    plain.eval(), averaged.eval()
    images = torch.randn(3, 1, 32, 32)
    with torch.no_grad():
        expected = F.normalize(plain(images) + plain(images.flip(-1)), dim=1)
        torch.testing.assert_close(averaged(images), expected)
        torch.testing.assert_close(averaged(images.flip(-1)), averaged(images), atol=1e-6, rtol=0)
        assert not torch.allclose(plain(images.flip(-1)), plain(images), atol=1e-3)  # the network is not symmetric
    plain.train(), averaged.train()
    torch.testing.assert_close(averaged(images), plain(images))


def test_output_stride_on_a_model_without_it_says_what_to_do():
    with pytest.raises(UserError, match="timm's test_vit has no output_stride .*leave model.output_stride unset"):
        Embedder("test_vit", pooling="avg", output_stride=16)


def test_unknown_backbone_suggests_close_names():
    with pytest.raises(UserError, match="unknown backbone 'resnet5O'.*did you mean.*resnet50"):
        Embedder("resnet5O")


def test_missing_weights_file_says_what_to_give(tmp_path):
    with pytest.raises(UserError, match="model.weights file not found"):
        Embedder("resnet10t", weights=str(tmp_path / "missing.safetensors"))


@pytest.mark.slow
def test_pretrained_offline_without_weights_says_how_to_fix():
    code = "from retrieval.models import Embedder; Embedder('resnet10t', pretrained=True)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert "UserError: could not load pretrained weights for resnet10t" in result.stderr
    assert "set model.weights=PATH" in result.stderr
