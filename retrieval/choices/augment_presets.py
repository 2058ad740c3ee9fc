"""Named augmentation presets: every `augment.*` knob at once, for one kind of image.

A plain table (no imports from the rest of the package), so that `retrieval.config` and the dataset
registry (`retrieval.choices.datasets`, which names each dataset's preset) can use it without importing
each other. `retrieval.data.transforms` turns the resolved values into timm / torchvision transforms;
`retrieval.config.AugmentConfig` documents each knob and holds its neutral default (no crop, no
flip, no affine, no photometric noise, the whole image at eval, borders in the image's own colour):
a preset lists only the knobs it sets otherwise.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

__all__ = ["AUTO_PRESET", "EVAL_MODES", "FILLS", "PRESETS", "EvalMode", "Fill", "PresetName"]

PresetName = Literal["natural", "glyph", "artwork", "document", "sketch", "light"]
EvalMode = Literal["center_crop", "resize", "pad_square"]
Fill = Literal["auto", "white", "black", "mean"]
EVAL_MODES: tuple[str, ...] = typing.get_args(EvalMode)
FILLS: tuple[str, ...] = typing.get_args(Fill)

# `augment.preset: auto` stands for the preset its dataset names (`DatasetSpec.augment_preset`).
AUTO_PRESET = "auto"

PRESETS: dict[PresetName, dict[str, Any]] = {
    # Natural photos (CUB, Cars, SOP, In-Shop): the benchmark recipe, RandomResizedCrop + flip,
    # eval Resize(size / 0.875) + CenterCrop(size).
    "natural": {
        "crop_scale": (0.08, 1.0),
        "hflip": 0.5,
        "eval_mode": "center_crop",
        "crop_pct": 0.875,
        "fill": "mean",
    },
    # Characters and symbols: no flip (mirrored glyphs are other glyphs), no
    # crop (a cut stroke changes the class), light affine (5 deg / 4%: 10 deg / 10% cost validation MAP@R
    # on unseen glyphs, docs/experiments/glyphs.md, "What made the difference: one knob at a time"), the whole image
    # at eval, borders in the image's background colour.
    "glyph": {
        "affine_degrees": 5.0,
        "affine_translate": 0.04,
        "affine_scale": (0.9, 1.1),
    },
    # Colour artwork drawn in several styles (emoji from several vendors, icons, logos, clip art): the
    # glyph geometry with a wider affine (renders differ in size, angle and position), and photometric
    # noise meant to teach style invariance: colour jitter with a small hue shift, grayscale, blur and
    # random erasing. An option, not `csv_artwork.yaml`'s default: on the emoji benchmark it tied the glyph
    # geometry at 64 px and lost to it at 32 px (docs/experiments/emoji.md, "The style augmentation at 32 px").
    "artwork": {
        "affine_degrees": 10.0,
        "affine_translate": 0.08,
        "affine_scale": (0.85, 1.15),
        "color_jitter": 0.4,
        "hue_jitter": 0.05,
        "grayscale": 0.2,
        "blur": 0.2,
        "random_erasing": 0.25,
    },
    # Pages and portrait documents: no flip, no crop, very light affine, letterboxed (pad_square)
    # in training and eval so the whole page keeps its aspect ratio, padded with the page's colour.
    "document": {
        "affine_degrees": 3.0,
        "affine_translate": 0.05,
        "affine_scale": (0.95, 1.05),
        "eval_mode": "pad_square",
    },
    # Line drawings and sketches: no crop, mirror images are the same object (flip ok),
    # light affine, the whole image at eval, borders in the image's own background colour.
    "sketch": {
        "hflip": 0.5,
        "affine_degrees": 10.0,
        "affine_translate": 0.1,
        "affine_scale": (0.9, 1.1),
    },
    # Images of unknown kind: nothing that can change a class (no crop, no flip), light affine,
    # the whole image at eval, borders in the image's own background colour.
    "light": {
        "affine_degrees": 10.0,
        "affine_translate": 0.1,
        "affine_scale": (0.9, 1.1),
    },
}
