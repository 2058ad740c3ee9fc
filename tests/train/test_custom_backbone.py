"""Your own `nn.Module` as a registered backbone: configured by name, checkpointed, exported, indexed and served."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
from torch import nn

from retrieval.checkpoint import Checkpoint
from retrieval.config import ModelConfig
from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.onnx_export import export_checkpoint
from retrieval.models import Embedder
from retrieval.models import backbones as registry
from retrieval.serve import create_app

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_custom_model.py"


def _example():
    spec = importlib.util.spec_from_file_location("train_custom_model", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Flat(nn.Module):
    """A backbone that pools itself: `(B, C, H, W)` -> `(B, 6)`."""

    def __init__(self, in_chans: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, 6, 3)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.conv(images).mean(dim=(2, 3))


def test_a_registered_builder_is_a_model_backbone_name_and_timm_names_stay_timms(monkeypatch):
    monkeypatch.setattr(registry, "BACKBONES", registry.BACKBONES.fresh())

    @registry.register_backbone("flat_test")
    def flat(*, pretrained: bool, in_chans: int) -> nn.Module:
        return _Flat(in_chans)

    model = Embedder(backbone="flat_test", embedding_dim=4, pooling="avg", in_chans=2)
    assert model(torch.rand(3, 2, 16, 16)).shape == (3, 4) and model.data_config()["mean"] == (0.485, 0.456, 0.406)
    assert registry.registered_backbones() == ["flat_test"]
    assert registry.builder_path("flat_test").endswith(
        ":test_a_registered_builder_is_a_model_backbone_name_and_timm_names_stay_timms.<locals>.flat"
    )
    assert registry.builder_path("resnet10t") is None
    with pytest.raises(ValueError, match="is a timm model"):
        registry.register_backbone("resnet10t")(flat)
    with pytest.raises(ValueError, match="already registered by"):
        registry.register_backbone("flat_test")(_Flat)
    with pytest.raises(UserError, match="model.weights applies to timm backbones"):
        Embedder(backbone="flat_test", weights="w.safetensors")
    with pytest.raises(UserError, match="model.pooling=token takes a timm ViT's class token"):
        Embedder(backbone="flat_test", pooling="token")
    with pytest.raises(UserError, match="neither a timm model nor a registered one"):
        Embedder(backbone="flat_tset")


def test_a_package_registers_a_backbone_through_the_entry_point_group(monkeypatch, tmp_path):
    """What `[project.entry-points."retrieval.backbones"]` installs: found by name, without importing it first."""
    monkeypatch.setattr(registry, "BACKBONES", registry.BACKBONES.fresh())
    (tmp_path / "my_backbones.py").write_text(
        "from torch import nn\n\n"
        "def tiny(*, pretrained=False, in_chans=3):\n"
        "    return nn.Sequential(nn.Conv2d(in_chans, 5, 3), nn.ReLU())\n"
    )
    info = tmp_path / "my_backbones-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-backbones\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[retrieval.backbones]\ntiny_ep = my_backbones:tiny\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_backbones", raising=False)
    assert registry.backbone_builder("tiny_ep") is not None
    assert registry.builder_path("tiny_ep") == "my_backbones:tiny"
    assert Embedder(backbone="tiny_ep", embedding_dim=3, pooling="gem")(torch.rand(2, 3, 12, 12)).shape == (2, 3)
    assert registry.backbone_builder("not_installed") is None


def test_a_checkpoint_names_the_builder_a_process_lacks(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "BACKBONES", registry.BACKBONES.fresh())
    registry.register_backbone("flat_ckpt")(lambda *, pretrained, in_chans: _Flat(in_chans))
    config = ModelConfig(backbone="flat_ckpt", embedding_dim=4, pooling="max", in_chans=1, pretrained=False)
    model = Embedder(**config.model_dump())
    Checkpoint(model=model.state_dict(), model_config=config, run_config={}, num_classes=2).save(tmp_path / "c.pt")
    loaded = Checkpoint.read(tmp_path / "c.pt")
    assert (
        loaded.backbone_builder == f"{__name__}:test_a_checkpoint_names_the_builder_a_process_lacks.<locals>.<lambda>"
    )
    torch.testing.assert_close(loaded.embedder()(torch.ones(1, 1, 8, 8)), model.eval()(torch.ones(1, 1, 8, 8)))
    monkeypatch.setattr(registry, "BACKBONES", registry.BACKBONES.fresh())  # a process that never imported the builder
    with pytest.raises(UserError, match=r"backbone 'flat_ckpt' is built by .*<lambda>, which is not registered here"):
        loaded.embedder()


@pytest.mark.slow
def test_the_examples_own_model_is_exported_indexed_and_served(tmp_path):
    """examples/train_custom_model.py's CNN trained, then `export`, `index build` from the export, and `serve`."""
    example = _example()
    result = example.train(epochs=1, out=tmp_path / "run")
    assert result.test["recall@1"] > 0.3  # 10 classes: chance is about 0.1
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    assert Checkpoint.read(best).backbone_builder == "train_custom_model:small_cnn"
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    test = example.digits_data().test
    for row in range(0, 60, 2):
        image, label = test.dataset[row]
        pixels = (image[0].numpy() * 255).round().astype(np.uint8)
        Image.fromarray(pixels, "L").save(gallery / f"{int(label)}_{row:03d}.png")
    exported, index_dir = tmp_path / "export", tmp_path / "index"
    # What `export` and `index build --model EXPORT --images GALLERY --type flat` run.
    export_checkpoint(best, exported)
    build_index(IndexBuildRequest(index_dir, EncoderChoice(model=exported), images=gallery, kind="flat"))
    query = sorted(gallery.glob("*.png"))[7]
    with TestClient(create_app(index_dir, model_dir=exported, device="cpu", reload_interval=0)) as client:
        answer = client.post("/search", files={"image": ("q.png", io.BytesIO(query.read_bytes()), "image/png")})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert results[0]["path"].endswith(query.name) and results[0]["score"] > 0.999  # the query image itself
