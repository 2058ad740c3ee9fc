"""Each augment preset and knob does what its description says, checked on synthetic images with known content."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from retrieval.choices.augment_presets import PRESETS
from retrieval.config import AugmentConfig, resolve_augment
from retrieval.data.transforms import (
    border_colour,
    build_eval_transform,
    build_train_transform,
    channel_stats,
    describe_eval_transform,
)

# mean 0.5, std 0.5: a normalized pixel is 2 * value / 255 - 1 (black -1, white +1).
HALF = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "interpolation": "bicubic"}
DRAWS = 200


def _augment(preset: str, **knobs):
    return resolve_augment({"preset": preset, **knobs}, "csv")


def _normalized(pixels: np.ndarray) -> torch.Tensor:
    """Reference normalization of uint8 pixels `(H, W)` with HALF: `(1, H, W)`."""
    return torch.from_numpy(pixels.astype(np.float32) / 255.0 * 2.0 - 1.0)[None]


def _gradient(width: int = 64, height: int = 64) -> Image.Image:
    """Dark on the left, light on the right: a flip is the only thing that makes the right side darker."""
    row = np.linspace(0, 255, width).astype(np.uint8)
    return Image.fromarray(np.tile(row, (height, 1)), mode="L")


def _flipped_fraction(transform) -> float:
    image = _gradient()
    flips = 0
    for _ in range(DRAWS):
        out = transform(image)[0]
        half = out.shape[1] // 2
        flips += int(out[:, :half].mean() > out[:, half:].mean())
    return flips / DRAWS


@pytest.mark.parametrize("preset", ["glyph", "document", "light"])
def test_no_flip_presets_never_flip(preset):
    torch.manual_seed(0)
    assert _flipped_fraction(build_train_transform(_augment(preset), 32, HALF, 1)) == 0.0


@pytest.mark.parametrize("preset", ["natural", "sketch"])
def test_flip_presets_flip_about_half_the_time(preset):
    torch.manual_seed(0)
    assert 0.35 < _flipped_fraction(build_train_transform(_augment(preset), 32, HALF, 1)) < 0.65


def test_an_explicit_knob_beats_the_preset():
    torch.manual_seed(0)
    augment = _augment("glyph", hflip=1.0)
    assert augment.hflip == 1.0 and augment.affine_degrees == PRESETS["glyph"]["affine_degrees"]
    assert _flipped_fraction(build_train_transform(augment, 32, HALF, 1)) == 1.0


def _edge_marks() -> np.ndarray:
    """A 2:1 white image (64 x 32) with black 4-pixel bars at its left and right edges."""
    pixels = np.full((32, 64), 255, dtype=np.uint8)
    pixels[:, :4] = 0
    pixels[:, -4:] = 0
    return pixels


@pytest.mark.parametrize("preset", ["glyph", "sketch", "light"])
def test_eval_resize_keeps_the_whole_image(preset):
    pixels = _edge_marks()
    out = build_eval_transform(_augment(preset), 32, HALF, 1)(Image.fromarray(pixels))
    reference = np.asarray(Image.fromarray(pixels).resize((32, 32), Image.Resampling.BICUBIC))
    torch.testing.assert_close(out, _normalized(reference), atol=1e-6, rtol=0)
    assert out[0, :, 0].max() < 0 and out[0, :, -1].max() < 0  # both edge bars survive


def test_eval_center_crop_cuts_the_sides_of_a_wide_image():
    out = build_eval_transform(_augment("natural"), 32, HALF, 1)(Image.fromarray(_edge_marks()))
    assert out.shape == (1, 32, 32)
    assert out[0, :, 0].min() > 0.9 and out[0, :, -1].min() > 0.9  # the bars are cropped away


@pytest.mark.parametrize("crop_pct", [0.5, 0.875, 1.0])
def test_center_crop_honours_crop_pct(crop_pct):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(128, 128), dtype=np.uint8)
    augment = _augment("natural", crop_pct=crop_pct)
    out = build_eval_transform(augment, 32, HALF, 1)(Image.fromarray(pixels))
    side = int(32 / crop_pct)  # timm's eval: the image to size / crop_pct, then the central size x size
    resized = np.asarray(Image.fromarray(pixels).resize((side, side), Image.Resampling.BICUBIC))
    start = (side - 32) // 2
    reference = resized[start : start + 32, start : start + 32]
    torch.testing.assert_close(out, _normalized(reference), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("fill", "value"), [("white", 1.0), ("black", -1.0), ("mean", 2 * round(127.5) / 255 - 1)])
def test_pad_square_letterboxes_a_wide_image_with_the_fill(fill, value):
    pixels = np.full((32, 64), 60, dtype=np.uint8)  # 2:1, one flat grey
    out = build_eval_transform(_augment("document", fill=fill), 32, HALF, 1)(Image.fromarray(pixels))
    grey = 2 * 60 / 255 - 1
    torch.testing.assert_close(out[0, 8:24], torch.full((16, 32), grey), atol=1e-6, rtol=0)  # the image, 32 x 16
    bands = torch.cat([out[0, :8], out[0, 24:]])
    torch.testing.assert_close(bands, torch.full_like(bands, value), atol=1e-6, rtol=0)


def test_document_training_letterboxes_too():
    """No random crop: training sees the eval geometry (plus a light affine), so pages are never cut."""
    pixels = np.full((32, 64), 60, dtype=np.uint8)
    transform = build_train_transform(
        _augment("document", affine_degrees=0.0, affine_translate=0.0, affine_scale=(1.0, 1.0), fill="white"),
        32,
        HALF,
        1,
    )
    out = transform(Image.fromarray(pixels))
    assert torch.allclose(out[0, :8], torch.ones(8, 32)) and torch.allclose(out[0, 24:], torch.ones(8, 32))


@pytest.mark.parametrize(("fill", "border"), [("white", 1.0), ("black", -1.0)])
def test_affine_borders_take_the_fill_colour(fill, border):
    torch.manual_seed(0)
    grey = np.full((32, 32), 128, dtype=np.uint8)
    transform = build_train_transform(_augment("glyph", affine_degrees=45.0, fill=fill), 32, HALF, 1)
    corners = torch.stack([transform(Image.fromarray(grey))[0, [0, 0, -1, -1], [0, -1, 0, -1]] for _ in range(50)])
    # A rotation of more than a few degrees moves a corner outside the image: it shows the fill.
    assert (corners - border).abs().lt(0.05).any(dim=1).float().mean() > 0.5
    assert not (corners + border).abs().lt(0.05).any()  # never the other colour


@pytest.mark.parametrize("paper", [0, 60, 230])
def test_auto_fill_takes_each_images_own_background(paper):
    """Strokes on a page of any colour: auto pads and fills with the page, never with a fixed colour."""
    pixels = np.full((32, 64), paper, dtype=np.uint8)
    pixels[10:20, 20:40] = 255 - paper  # a stroke in the middle, off the border
    page = 2 * paper / 255 - 1
    letterboxed = build_eval_transform(_augment("document", fill="auto"), 32, HALF, 1)(Image.fromarray(pixels))
    bands = torch.cat([letterboxed[0, :8], letterboxed[0, 24:]])
    torch.testing.assert_close(bands, torch.full_like(bands, page), atol=1e-6, rtol=0)
    torch.manual_seed(0)
    square = np.ascontiguousarray(pixels[:, 16:48])
    rotate = build_train_transform(_augment("glyph", affine_degrees=45.0, fill="auto"), 32, HALF, 1)
    corners = torch.stack([rotate(Image.fromarray(square))[0, [0, 0, -1, -1], [0, -1, 0, -1]] for _ in range(20)])
    torch.testing.assert_close(corners, torch.full_like(corners, page), atol=0.02, rtol=0)


def test_auto_fill_draws_the_same_affine_as_a_fixed_fill_of_that_colour():
    """On a white page, auto and white give the same pictures from the same seed (same random draws)."""
    pixels = np.full((32, 32), 255, dtype=np.uint8)
    pixels[8:24, 12:20] = 0
    outputs = []
    for fill in ("auto", "white"):
        torch.manual_seed(3)
        transform = build_train_transform(_augment("glyph", fill=fill), 32, HALF, 1)
        outputs.append(torch.stack([transform(Image.fromarray(pixels)) for _ in range(5)]))
    torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)


def test_on_the_digits_auto_fill_is_the_demos_black_fill():
    """Light strokes on black: auto finds black, so the demo's hand-set `fill: black` is what auto gives."""
    from retrieval.data import load_digits_split

    images, _ = load_digits_split("train", 32)
    outputs = []
    for fill in ("auto", "black"):
        torch.manual_seed(0)
        transform = build_train_transform(resolve_augment({"preset": "light", "fill": fill}, "digits"), 32, HALF, 3)
        outputs.append(torch.stack([transform(image) for image in images[:64]]))
    torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)


def test_border_colour_is_the_median_of_the_outer_ring():
    rgb = np.zeros((6, 6, 3), dtype=np.uint8)
    rgb[:, :] = (200, 100, 50)
    rgb[0, :3] = (0, 0, 0)  # a few dark pixels on the ring do not move the median
    assert border_colour(Image.fromarray(rgb)) == (200, 100, 50)


def test_natural_random_crop_zooms_in():
    """RandomResizedCrop(0.08-1) on a fine checkerboard: crops enlarge the squares, eval never does."""
    torch.manual_seed(0)
    pixels = (np.indices((64, 64)).sum(axis=0) % 2 * 255).astype(np.uint8)  # 1-pixel checkerboard
    train = build_train_transform(_augment("natural"), 32, HALF, 1)
    glyph = build_train_transform(
        _augment("glyph", affine_degrees=0.0, affine_translate=0.0, affine_scale=(1.0, 1.0)), 32, HALF, 1
    )
    # Downscaled 2x the checkerboard averages to grey; zoomed-in crops keep its contrast.
    contrast = [train(Image.fromarray(pixels)).std().item() for _ in range(50)]
    assert max(contrast) > 0.5
    assert glyph(Image.fromarray(pixels)).std().item() < 0.1


def test_photometric_knobs_change_a_flat_image_only_when_set():
    torch.manual_seed(0)
    flat = Image.fromarray(np.full((32, 32, 3), 100, dtype=np.uint8))
    still = _augment("glyph", affine_degrees=0.0, affine_translate=0.0, affine_scale=(1.0, 1.0))
    for knobs in ({"color_jitter": 0.4}, {"auto_augment": "rand-m9-mstd0.5"}, {"random_erasing": 1.0}):
        transform = build_train_transform(resolve_augment({**_as_raw(still), **knobs}, "csv"), 32, HALF, 3)
        outputs = torch.stack([transform(flat) for _ in range(20)])
        assert outputs.std(dim=0).max() > 0.05, knobs
    quiet = build_train_transform(still, 32, HALF, 3)
    outputs = torch.stack([quiet(flat) for _ in range(5)])
    torch.testing.assert_close(outputs, torch.full_like(outputs, 2 * 100 / 255 - 1), atol=1e-6, rtol=0)


def test_hue_grayscale_and_blur_knobs_do_what_they_say():
    torch.manual_seed(0)
    still = _as_raw(_augment("glyph", affine_degrees=0.0, affine_translate=0.0, affine_scale=(1.0, 1.0)))

    def outputs(image: Image.Image, **knobs) -> torch.Tensor:
        transform = build_train_transform(resolve_augment({**still, **knobs}, "csv"), 32, HALF, 3)
        return torch.stack([transform(image) for _ in range(20)])

    red = Image.fromarray(np.tile(np.array([200, 40, 40], dtype=np.uint8), (32, 32, 1)))
    # Hue moves the channels apart differently; brightness alone keeps red's channel ratios.
    hue = outputs(red, color_jitter=1e-6, hue_jitter=0.5)
    assert (hue[:, 1].mean(dim=(1, 2)) - hue[:, 2].mean(dim=(1, 2))).abs().max() > 0.1
    grey = outputs(red, grayscale=1.0)
    torch.testing.assert_close(grey[:, 0], grey[:, 1])
    torch.testing.assert_close(grey[:, 1], grey[:, 2])
    edge = np.zeros((32, 32, 3), dtype=np.uint8)
    edge[:, 16:] = 255
    sharp, blurred = outputs(Image.fromarray(edge))[0], outputs(Image.fromarray(edge), blur=1.0)
    steps = (blurred[:, 0, :, 15] - blurred[:, 0, :, 16]).abs().mean(dim=1)
    assert steps.min() < (sharp[0, :, 15] - sharp[0, :, 16]).abs().mean() - 0.05


def test_the_artwork_preset_is_the_glyph_geometry_with_photometric_noise():
    artwork, glyph = _augment("artwork"), _augment("glyph")
    assert (artwork.crop_scale, artwork.hflip, artwork.eval_mode, artwork.fill) == (None, 0.0, "resize", "auto")
    assert artwork.affine_degrees > glyph.affine_degrees and artwork.color_jitter > 0
    assert min(artwork.hue_jitter, artwork.grayscale, artwork.blur, artwork.random_erasing) > 0
    assert max(glyph.hue_jitter, glyph.grayscale, glyph.blur, glyph.random_erasing) == 0


def _as_raw(augment) -> dict:
    return {key: getattr(augment, key) for key in AugmentConfig.model_fields}


@pytest.mark.parametrize("in_chans", [1, 3])
@pytest.mark.parametrize("source", ["RGB", "L", "tensor3", "tensor1"])
def test_any_input_gives_the_models_channels(in_chans, source):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, size=(40, 40, 3), dtype=np.uint8)
    inputs = {
        "RGB": Image.fromarray(rgb),
        "L": Image.fromarray(rgb).convert("L"),
        "tensor3": torch.from_numpy(rgb).permute(2, 0, 1).float() / 255,
        "tensor1": torch.from_numpy(rgb[..., 0]).float()[None] / 255,
    }
    augment = _augment("natural")
    for build in (build_train_transform, build_eval_transform):
        assert build(augment, 32, HALF, in_chans)(inputs[source]).shape == (in_chans, 32, 32)


def test_grayscale_uses_the_mean_of_the_rgb_statistics():
    imagenet = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
    mean, std = channel_stats(imagenet, 1)
    assert mean == pytest.approx((np.mean(imagenet["mean"]),)) and std == pytest.approx((np.mean(imagenet["std"]),))
    assert channel_stats(imagenet, 3) == (imagenet["mean"], imagenet["std"])
    # Grey pixels normalize to the same value in a grayscale and in an RGB pipeline with equal stats.
    grey = Image.fromarray(np.full((32, 32), 77, dtype=np.uint8))
    out = build_eval_transform(_augment("glyph"), 32, imagenet, 1)(grey)
    torch.testing.assert_close(out, torch.full((1, 32, 32), (77 / 255 - mean[0]) / std[0]), atol=1e-6, rtol=0)


def test_a_digits_tensor_keeps_the_demo_augmentation():
    """The demo's float tensors go through the same pipeline; at its own size, eval only normalizes."""
    image = torch.rand(3, 32, 32)
    augment = resolve_augment({"preset": "light", "fill": "black"}, "digits")
    out = build_eval_transform(augment, 32, HALF, 3)(image)
    torch.testing.assert_close(out, (image * 255).to(torch.uint8).float() / 255 * 2 - 1, atol=1e-6, rtol=0)
    assert (augment.affine_degrees, augment.affine_translate, augment.affine_scale) == (10.0, 0.1, (0.9, 1.1))
    assert augment.hflip == 0.0 and augment.crop_scale is None


def test_bad_in_chans_is_a_user_error():
    from retrieval.errors import UserError

    with pytest.raises(UserError, match="model.in_chans=4: .* set model.in_chans to 1 or 3"):
        build_eval_transform(_augment("glyph"), 32, HALF, 4)


def test_description_names_what_the_eval_transform_does():
    record = describe_eval_transform(_augment("natural"), 224, HALF, 3)
    assert record.to_dict() == {
        "format": 1,
        "image_size": 224,
        "resize_mode": "center_crop",
        "crop_pct": 0.875,
        "fill": None,
        "interpolation": "bicubic",
        "channels": "RGB",
        "mean": [0.5] * 3,
        "std": [0.5] * 3,
        "input": record.input.model_dump(mode="json"),
        "in_chans": 3,
    }
    assert describe_eval_transform(_augment("document"), 64, HALF, 1).fill == "auto"
