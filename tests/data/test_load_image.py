"""`load_image` on real PNG files of every mode: transparency is composited onto white, gray stays gray."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from retrieval.data import ImageDataset, load_image
from retrieval.images import upright_image
from tests.data.exif_images import UPRIGHT, write_oriented_jpegs

# A black stroke (alpha 255), a half-transparent black dot (alpha 128), the rest fully transparent.
ALPHA = np.zeros((16, 16), dtype=np.uint8)
ALPHA[:, 7:9] = 255
ALPHA[2, 2] = 128
# Composited onto white: out = alpha * 0 + (1 - alpha) * 255.
EXPECTED = np.round(255 * (1 - ALPHA / 255)).astype(np.uint8)


def _stroke_png(tmp_path, mode: str):
    """The stroke as a real PNG in `mode`; transparent pixels are black underneath, as drawing tools leave them.

    RGBA and LA carry the alpha channel; P, L and RGB mark one value transparent (PNG tRNS chunk),
    so their half-transparent dot is fully transparent and, for L and RGB, the stroke is value 1.
    """
    black = np.zeros((16, 16), dtype=np.uint8)
    stroke = (ALPHA == 255).astype(np.uint8)
    transparency = None
    if mode == "RGBA":
        image = Image.fromarray(np.dstack([black, black, black, ALPHA]), mode="RGBA")
    elif mode == "LA":
        image = Image.fromarray(np.dstack([black, ALPHA]), mode="LA")
    elif mode == "P":  # palette index 0 transparent black, index 1 opaque black
        image = Image.fromarray(stroke, mode="P")
        image.putpalette([0, 0, 0, 0, 0, 0])
        transparency = 0
    else:  # L or RGB with pure black transparent
        image = Image.fromarray(stroke if mode == "L" else np.dstack([stroke] * 3), mode=mode)
        transparency = 0 if mode == "L" else (0, 0, 0)
    path = tmp_path / f"stroke_{mode}.png"
    image.save(path, **({} if transparency is None else {"transparency": transparency}))
    return path


_EXPECTED_BY_SOURCE = {
    "RGBA": EXPECTED,
    "LA": EXPECTED,
    "P": np.where(ALPHA == 255, 0, 255),
    "L": np.where(ALPHA == 255, 1, 255),
    "RGB": np.where(ALPHA == 255, 1, 255),
}


@pytest.mark.parametrize("source", list(_EXPECTED_BY_SOURCE))
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_transparent_pixels_become_white_and_the_stroke_stays_dark(tmp_path, source, mode):
    path = _stroke_png(tmp_path, source)
    assert Image.open(path).mode == source
    loaded = load_image(path, mode)
    assert loaded.mode == mode
    pixels = np.asarray(loaded).astype(int)
    pixels = pixels if mode == "L" else pixels.transpose(2, 0, 1)
    expected = _EXPECTED_BY_SOURCE[source].astype(int)
    np.testing.assert_allclose(pixels, np.broadcast_to(expected, pixels.shape), atol=1)


def test_without_a_mode_grayscale_files_stay_grayscale(tmp_path):
    assert load_image(_stroke_png(tmp_path, "LA")).mode == "L"
    assert load_image(_stroke_png(tmp_path, "RGBA")).mode == "RGB"
    gray = tmp_path / "gray.png"
    Image.fromarray(np.full((4, 4), 90, dtype=np.uint8)).save(gray)
    assert load_image(gray).mode == "L" and np.asarray(load_image(gray, "RGB")).tolist() == [[[90] * 3] * 4] * 4


def test_sixteen_bit_grayscale_is_scaled_not_clipped(tmp_path):
    values = (np.arange(16, dtype=np.uint16) * 4369).reshape(4, 4)  # 0 .. 65535
    path = tmp_path / "deep.png"
    Image.fromarray(values).save(path)
    assert Image.open(path).mode.startswith("I;16")
    np.testing.assert_allclose(np.asarray(load_image(path, "L")), values / 257, atol=1)


def test_the_csv_dataset_reads_through_load_image(tmp_path):
    path = _stroke_png(tmp_path, "RGBA")
    dataset = ImageDataset([path], np.array([0]), transform=np.asarray)
    image, label = dataset[0]
    assert label == 0 and image.shape == (16, 16, 3)
    np.testing.assert_allclose(image[..., 0], EXPECTED, atol=1)


def test_an_exif_orientation_turns_the_image_upright_in_load_image_and_the_training_data(tmp_path):
    upright, sideways, untagged = write_oriented_jpegs(tmp_path)
    assert np.asarray(load_image(untagged)).shape == (32, 64, 3)  # the pixels are stored sideways
    assert _mean_difference(load_image(upright), UPRIGHT) < 4  # JPEG keeps the flat blocks within a few levels
    assert _mean_difference(load_image(sideways), UPRIGHT) < 4
    dataset = ImageDataset([upright, sideways], np.array([0, 0]), lambda image: np.asarray(image, dtype=float))
    assert _mean_difference(dataset[1][0], dataset[0][0]) < 4


def _mean_difference(image, expected: np.ndarray) -> float:
    """Mean absolute difference per pixel value; infinite when the shapes differ (an image left sideways)."""
    pixels = np.asarray(image, dtype=float)
    return float(np.abs(pixels - expected).mean()) if pixels.shape == expected.shape else float("inf")


def test_an_image_without_an_orientation_is_not_copied(tmp_path):
    upright, _, _ = write_oriented_jpegs(tmp_path)
    with Image.open(upright) as image:
        assert upright_image(image) is image
