"""Each unlabeled image gives two different views, its index as label; pretraining's knobs replace augment's."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from retrieval.config import PretrainConfig, resolve_augment
from retrieval.pretrain.views import view_augment, views_dataset

STATS = {"mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25), "interpolation": "bilinear"}


def test_views_replace_the_crop_and_colour_knobs_and_keep_the_rest():
    augment = resolve_augment({"preset": "glyph"}, "csv")
    views = view_augment(augment, PretrainConfig(crop_scale=(0.3, 0.9), color_jitter=0.2, blur=0.1))
    assert (views.crop_scale, views.color_jitter, views.blur) == ((0.3, 0.9), 0.2, 0.1)
    assert (views.hflip, views.affine_degrees, views.fill) == (augment.hflip, augment.affine_degrees, augment.fill)


def test_dataset_items_are_two_different_views_and_the_image_index(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for index in range(3):
        paths.append(tmp_path / f"{index}.png")
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(paths[-1])
    augment = resolve_augment({"preset": "artwork"}, "csv")
    dataset = views_dataset(paths, augment, PretrainConfig(), 24, STATS, 3, "fail")
    torch.manual_seed(0)
    views, label = dataset[2]
    assert views.shape == (2, 3, 24, 24) and label == 2
    assert not torch.equal(views[0], views[1])
