"""Each unlabeled image gives two different views, its index as label; pretraining's knobs replace augment's;
the one-ink view redraws a picture in one colour on paper."""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
import torch
from PIL import Image

from retrieval.config import PretrainConfig, config_from_dict, resolve_augment
from retrieval.errors import UserError
from retrieval.pretrain.views import TwoViews, one_ink, view_augment, views_dataset

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


def _as_tensor(image: Image.Image) -> torch.Tensor:
    """A picture's pixels as they are: a pipeline that shows what the view was drawn from."""
    return torch.from_numpy(np.asarray(image).copy())


def _drawing() -> Image.Image:
    """A light background, a dark red square, and a white highlight inside the square (4% of the drawing)."""
    pixels = np.full((40, 40, 3), (235, 225, 200), dtype=np.uint8)
    pixels[10:30, 10:30] = (150, 20, 20)
    pixels[12:14, 12:20] = (255, 255, 255)
    return Image.fromarray(pixels)


@pytest.mark.parametrize("seed", range(20))
def test_one_ink_draws_the_drawing_in_one_dark_ink_on_light_paper(seed):
    random.seed(seed)
    redrawn = np.asarray(one_ink(_drawing()))
    colours = np.unique(redrawn.reshape(-1, 3), axis=0)
    paper, ink = redrawn[0, 0], redrawn[20, 20]
    assert len(colours) == 2 and (paper >= 190).all() and (ink <= 140).all()
    background = np.ones((40, 40), dtype=bool)
    background[10:30, 10:30] = False
    assert (redrawn[background] == paper).all()
    assert (redrawn[14:30, 10:30] == ink).all()


def test_one_ink_leaves_the_lightest_part_of_the_drawing_as_paper_at_the_lowest_cut():
    random.seed(0)
    with mock.patch("random.uniform", return_value=0.7):
        redrawn = np.asarray(one_ink(_drawing()))
    assert (redrawn[12:14, 12:20] == redrawn[0, 0]).all()
    assert not (redrawn[20, 20] == redrawn[0, 0]).all()


def test_one_ink_of_a_blank_image_is_blank_paper():
    random.seed(0)
    redrawn = np.asarray(one_ink(Image.new("RGB", (16, 16), (240, 240, 240))))
    assert len(np.unique(redrawn.reshape(-1, 3), axis=0)) == 1 and (redrawn >= 190).all()


@pytest.mark.parametrize(("probability", "one_ink_views"), [(0.0, 0), (1.0, 2)])
def test_views_are_redrawn_in_one_ink_with_the_configured_probability(probability, one_ink_views):
    views = TwoViews(_as_tensor, probability)
    random.seed(0)
    pair = views(_drawing())
    redrawn = sum(len(np.unique(view.reshape(-1, 3).numpy(), axis=0)) == 2 for view in pair)
    assert redrawn == one_ink_views
    if probability == 0.0:
        assert torch.equal(pair[0], _as_tensor(_drawing()))


def test_about_the_configured_share_of_views_is_redrawn():
    views = TwoViews(_as_tensor, 0.3)
    random.seed(1)
    redrawn = [
        len(np.unique(view.reshape(-1, 3).numpy(), axis=0)) == 2 for _ in range(200) for view in views(_drawing())
    ]
    assert 0.22 < np.mean(redrawn) < 0.38


def test_one_ink_is_a_probability():
    with pytest.raises(UserError, match=r"pretrain\.one_ink must be a probability in \[0, 1\]"):
        config_from_dict({"pretrain": {"one_ink": 1.5}})
