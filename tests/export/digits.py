"""The digits test images as PNG files and a checkpoint whose embeddings spread out on them: what the export tests
run on, here and in `tests/cli`."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from retrieval.checkpoint import Checkpoint
from retrieval.data import load_digits_split
from retrieval.inference.image_encoder import ImageEncoder


def digit_files(folder: Path, split: str) -> list[Path]:
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


def spread_digits_checkpoint(folder: Path, checkpoint_factory: Callable[..., Path]) -> Path:
    """The tiny untrained `TINY_BACKBONE`, its BatchNorm statistics and head bias set on 256 digits training images.

    No weight is trained. An untrained network maps every digit to nearly the same unit vector
    (mean cosine 0.997), so neighbour order would be decided by float rounding; with its statistics
    set on the data its embeddings spread out (mean cosine ~0.01) and the top-10 lists mean something.
    """
    base = Checkpoint.read(checkpoint_factory(folder / "untrained.pt"))
    encoder = ImageEncoder.from_loaded(base, folder / "untrained.pt", device="cpu")
    model = encoder.model
    batch = torch.stack([encoder.preprocess(Image.open(p)) for p in digit_files(folder / "train", "train")[:256]])
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


def on_digits(source: Path, path: Path, **data: object) -> Path:
    """`source` with its run config pointed at the digits demo data (and `data` keys), saved to `path`."""
    base = Checkpoint.read(source)
    config = copy.deepcopy(base.run_config)
    config["data"].update(name="digits", **data)
    dataclasses.replace(base, run_config=config).save(path)
    return path


def flat_onnx_index(out: Path, exported: Path, images: Path) -> Path:
    """What `index build --model EXPORTED --images IMAGES --type flat --out OUT` builds, through `build_index`."""
    from retrieval.export.encoder_choice import EncoderChoice
    from retrieval.export.index_build import IndexBuildRequest, build_index

    build_index(IndexBuildRequest(out, EncoderChoice(model=exported), images=images, kind="flat"))
    return out


def index_copy_and_new_digits(index: Path, digits_images: list[Path], folder: Path) -> tuple[Path, Path]:
    """A copy of `index` in `folder/index`, and a folder `folder/new` of 6 digits images it does not hold."""
    import shutil

    copy = folder / "index"
    shutil.copytree(index, copy)
    new = folder / "new"
    new.mkdir()
    for path in digits_images[1::150]:
        shutil.copy(path, new / path.name)
    return copy, new
