"""A checkpoint with spread-out embeddings, its ONNX export, and the digits test images as PNG files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.data import load_digits_split
from retrieval.inference.image_encoder import ImageEncoder


def _digit_files(folder: Path, split: str) -> list[Path]:
    """A digits split (8 x 8, its original pixels) as grayscale PNGs in one folder per label, sorted by path."""
    images, labels = load_digits_split(split, image_size=8)
    pixels = (images[:, 0].numpy() * 255).round().astype(np.uint8)
    paths = []
    for i, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        path = folder / str(label) / f"{i:04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(path)
        paths.append(path)
    return sorted(paths)


@pytest.fixture(scope="session")
def digits_images(tmp_path_factory) -> list[Path]:
    """The 899 digits test images."""
    return _digit_files(tmp_path_factory.mktemp("digits"), "test")


@pytest.fixture(scope="session")
def digits_checkpoint(tmp_path_factory, checkpoint_factory) -> Path:
    """The tiny untrained resnet10t with BatchNorm statistics and head bias set on 256 digits training images.

    No weight is trained. An untrained network maps every digit to nearly the same unit vector
    (mean cosine 0.997), so neighbour order would be decided by float rounding; with its statistics
    set on the data its embeddings spread out (mean cosine ~0.01) and the top-10 lists mean something.
    """
    folder = tmp_path_factory.mktemp("digits_checkpoint")
    base = Checkpoint.read(checkpoint_factory(folder / "untrained.pt"))
    encoder = ImageEncoder.from_loaded(base, folder / "untrained.pt", device="cpu")
    model = encoder.model
    batch = torch.stack([encoder.preprocess(Image.open(p)) for p in _digit_files(folder / "train", "train")[:256]])
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # a cumulative average over the one batch
    with torch.no_grad():
        model.train()
        model(batch)
        model.eval()
        model.head.bias -= model.head(model.pool_features(model.backbone.forward_features(batch))).mean(0)
    path = folder / "best.pt"
    dataclasses.replace(base, model=model.state_dict()).save(path)
    return path


@pytest.fixture(scope="session")
def exported(tmp_path_factory, digits_checkpoint) -> Path:
    """The ONNX export of `digits_checkpoint` (resnet10t, 16-d, 32 px RGB), made by `export_checkpoint` as
    `retrieval export --format onnx` makes it."""
    from retrieval.export.onnx_export import export_checkpoint

    out = tmp_path_factory.mktemp("export") / "digits"
    export_checkpoint(digits_checkpoint, out)
    return out
