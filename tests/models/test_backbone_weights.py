"""`model.weights`: loaded whole or refused in one line; `model.weights_partial` loads what fits and says how much.

That `--set model.weights_partial=true` reaches `evaluate --backbone --weights` is tests/cli/test_backbone_cli.py's.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import timm
import torch

from retrieval.errors import UserError
from retrieval.models import Embedder


def _save(tmp_path: Path, model: torch.nn.Module, name: str = "weights.pth") -> Path:
    path = tmp_path / name
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory) -> Path:
    """resnet18's weights: resnet10t's layer names mostly, but its stem and block counts differ."""
    torch.manual_seed(0)
    return _save(tmp_path_factory.mktemp("weights"), timm.create_model("resnet18"), "resnet18.pth")


def test_weights_of_another_model_are_refused_in_one_line_with_the_counts(resnet18_file, caplog):
    with caplog.at_level(logging.WARNING), pytest.raises(UserError) as refused:
        Embedder("resnet10t", embedding_dim=8, weights=resnet18_file)
    assert str(refused.value) == (
        f"model.weights {resnet18_file} does not fit resnet10t: 44 of 70 model tensors matched (3 of another shape), "
        "53 file tensors unexpected (first: conv1.weight); give resnet10t's own weights, "
        "or set model.weights_partial=true to load the 44 that match"
    )
    assert not caplog.records  # timm's list of every key stays out of the output


def test_weights_of_an_unrelated_model_offer_no_partial_load(tmp_path):
    path = _save(tmp_path, timm.create_model("mobilenetv3_small_050"))
    with pytest.raises(UserError, match=r"0 of 70 model tensors matched .*own weights$"):
        Embedder("resnet10t", embedding_dim=8, weights=path, weights_partial=True)


def test_a_partial_load_takes_what_fits_and_says_so_in_one_line(resnet18_file, caplog):
    state = torch.load(resnet18_file, weights_only=True)
    with caplog.at_level(logging.WARNING):
        model = Embedder("resnet10t", embedding_dim=8, weights=resnet18_file, weights_partial=True)
    (record,) = caplog.records
    assert record.getMessage() == (
        f"model.weights: partial load of {resnet18_file} into resnet10t: 44 of 70 model tensors matched "
        "(3 of another shape), 53 file tensors unexpected"
    )
    loaded = model.backbone.state_dict()
    torch.testing.assert_close(loaded["layer1.0.conv1.weight"], state["layer1.0.conv1.weight"])
    assert loaded["layer2.0.downsample.1.weight"].shape != state["layer2.0.downsample.1.weight"].shape


def test_a_whole_file_loads_silently_also_into_a_grayscale_stem(tmp_path, caplog):
    source = timm.create_model("resnet10t")
    path = _save(tmp_path, source)
    with caplog.at_level(logging.WARNING):
        model = Embedder("resnet10t", embedding_dim=8, weights=path, in_chans=1)
    assert not caplog.records
    stem = source.state_dict()["conv1.0.weight"]
    torch.testing.assert_close(model.backbone.state_dict()["conv1.0.weight"], stem.sum(dim=1, keepdim=True))


def test_a_vit_loads_its_own_weights_at_any_image_size(tmp_path):
    """Built with `dynamic_img_size`, a ViT keeps its native position grid: its weights fit, 32 px images run."""
    source = timm.create_model("vit_tiny_patch16_224")
    # `token`: the pooling of the file's model (timm's `avg` ViT normalizes with another layer, `fc_norm`).
    model = Embedder("vit_tiny_patch16_224", embedding_dim=8, pooling="token", weights=_save(tmp_path, source))
    torch.testing.assert_close(model.backbone.pos_embed, source.pos_embed)
    assert model.eval()(torch.rand(2, 3, 32, 32)).shape == (2, 8)
