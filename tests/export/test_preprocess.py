"""`Preprocess` (numpy + Pillow) gives the torch eval transform's pixels exactly, for every resize mode and fill."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from PIL import Image

from retrieval.config import resolve_augment
from retrieval.core.preprocess import Preprocess
from retrieval.data.transforms import build_eval_transform, describe_eval_transform
from retrieval.errors import UserError
from retrieval.images import flatten_image

_STATS = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
# (width, height): square, both orientations, smaller than the model input, odd sides that round half to even.
_SIZES = ((40, 40), (23, 61), (100, 37), (8, 8), (33, 34), (35, 20))


def _images(rng: np.random.Generator) -> list[Image.Image]:
    """Noise images of every size, as RGB, grayscale, and RGBA with a transparent border (flattened onto white)."""
    images = []
    for width, height in _SIZES:
        pixels = rng.integers(0, 256, (height, width, 4), dtype=np.uint8)
        pixels[:2, :, 3] = 0
        images += [Image.fromarray(pixels[..., :3]), Image.fromarray(pixels[..., 0]), Image.fromarray(pixels, "RGBA")]
    return [flatten_image(image) for image in images]


@pytest.mark.parametrize(
    ("eval_mode", "fill", "in_chans", "interpolation"),
    [
        *itertools.product(["center_crop", "resize"], [None], [1, 3], ["bicubic", "bilinear"]),
        *itertools.product(["pad_square"], ["auto", "white", "black", "mean"], [1, 3], ["bicubic"]),
    ],
)
def test_pixels_equal_the_torch_eval_transform(eval_mode, fill, in_chans, interpolation):
    augment = resolve_augment({"eval_mode": eval_mode, "crop_pct": 0.875, **({"fill": fill} if fill else {})}, "csv")
    stats = {**_STATS, "interpolation": interpolation}
    reference = build_eval_transform(augment, 32, stats, in_chans)
    preprocess = describe_eval_transform(augment, 32, stats, in_chans)
    for image in _images(np.random.default_rng(0)):
        expected = reference(image).numpy()
        assert preprocess(image).dtype == np.float32
        np.testing.assert_array_equal(preprocess(image), expected)


@pytest.mark.parametrize("eval_mode", ["center_crop", "resize", "pad_square"])
def test_the_resized_size_is_the_size_torchvision_resizes_to(eval_mode, tiny_checkpoint):
    """The size serve checks before decoding is the size the torch transform, and `Preprocess`, make."""
    from torchvision.transforms import v2

    from retrieval.inference.image_encoder import ImageEncoder

    augment = resolve_augment({"eval_mode": eval_mode, "crop_pct": 0.875}, "csv")
    preprocess = describe_eval_transform(augment, 32, _STATS, 3)
    resize = build_eval_transform(augment, 32, _STATS, 3).transforms[2]  # after ToPILImage and RGB
    assert isinstance(resize, v2.Resize)
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    encoder.transform_record = preprocess
    for width, height in ((1, 400), (400, 3), (23, 61), (100, 37), (8, 8), (3000, 2000)):
        got = preprocess.resized_size(width, height)
        assert encoder.resized_size(width, height) == got
        try:
            assert resize(Image.new("RGB", (width, height))).size == got, (width, height)
        except ValueError:  # torchvision cannot resize a side to 0 pixels: serve refuses such an image first
            assert min(got) == 0 and eval_mode == "pad_square"
    assert (
        describe_eval_transform(augment, 32, _STATS, 3).resized_size(1, 400_000)
        == {
            "center_crop": (36, 14_400_000),
            "resize": (32, 32),
            "pad_square": (0, 32),
        }[eval_mode]
    )


def test_json_round_trip_and_fill_as_pixel_values():
    augment = resolve_augment({"eval_mode": "pad_square", "fill": "mean"}, "csv")
    preprocess = describe_eval_transform(augment, 48, {**_STATS}, 3)
    data = json.loads(json.dumps(preprocess.to_dict()))
    assert data["fill"] == [124, 116, 104] and data["in_chans"] == 3 and data["interpolation"] == "bilinear"
    assert Preprocess.model_validate(data) == preprocess


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 99}, "format 99"),
        ({"resize_mode": "stretch"}, "preprocess.json.resize_mode must be one of center_crop, resize, pad_square"),
        ({"mean": [0.5]}, r"preprocess.json.mean must hold one value per channel \(3 for channels RGB\), got 1 means"),
        ({"interpolation": "cubic"}, "preprocess.json.interpolation must be one of nearest, .*got 'cubic'"),
        ({"resize_mode": "pad_square", "fill": [1, 2]}, r"preprocess.json.fill must be auto, a gray level 0-255"),
        ({"resize_mode": "pad_square", "fill": [1, 2, 300]}, r"preprocess.json.fill must be `auto` or one value"),
        ({"image_size": "big"}, "preprocess.json.image_size must be int, got 'big'"),
        ({"image_size": 32.0}, "preprocess.json.image_size must be int, got 32.0"),
        ({"in_chans": 1}, r"preprocess.json.in_chans must be 3 \(channels RGB\), got 1"),
        ({"std": [0.2, 0.2, 0.0]}, "preprocess.json.std must be numbers from 0.001 to 1"),
    ],
)
def test_a_broken_preprocess_json_is_one_line(change, message, tmp_path):
    augment = resolve_augment({"eval_mode": "resize"}, "csv")
    data = describe_eval_transform(augment, 32, {**_STATS}, 3).to_dict()
    (tmp_path / "preprocess.json").write_text(json.dumps({**data, **change}))
    with pytest.raises(UserError, match=message) as raised:
        Preprocess.read(tmp_path / "preprocess.json")
    assert "\n" not in str(raised.value) and "; export the model again" in str(raised.value)


def test_a_preprocess_json_of_the_untyped_layout_reads_as_written(tmp_path):
    """The file as exports before the typed record wrote it: `in_chans` and `input` for readers, a fill as a list."""
    written = {
        **{"format": 1, "image_size": 48, "resize_mode": "pad_square", "crop_pct": None, "fill": [124, 116, 104]},
        **{"interpolation": "bilinear", "channels": "RGB", "in_chans": 3, "mean": [0.485, 0.456, 0.406]},
        **{
            "std": [0.229, 0.224, 0.225],
            "input": {"layout": "NCHW", "dtype": "float32", "scale": "1/255, then (x - mean) / std"},
        },
    }
    (tmp_path / "preprocess.json").write_text(json.dumps(written))
    preprocess = Preprocess.read(tmp_path / "preprocess.json")
    assert preprocess.fill == (124, 116, 104) and preprocess.in_chans == 3 and preprocess.to_dict() == written
