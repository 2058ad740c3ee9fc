"""Training augmentation and evaluation resizing from an `AugmentConfig`, built with timm and torchvision v2.

Both pipelines take a PIL image (what `load_image` returns) or a `(C, H, W)` tensor (float in
[0, 1] or uint8, as the in-memory digits are) and give a normalized float tensor
`(in_chans, image_size, image_size)`. Stages, in order:

1. to a PIL image in mode `L` (in_chans 1) or `RGB` (in_chans 3);
2. geometry: timm's RandomResizedCrop when `crop_scale` is set, else the eval geometry
   (`center_crop`: Resize(size / crop_pct) + CenterCrop(size); `resize`: the whole image squashed
   to size x size; `pad_square`: the whole image letterboxed onto a `fill` square);
3. train only: RandomAffine (borders filled with `fill`), horizontal flip, then timm's
   auto-augment / colour jitter (with `hue_jitter`), random grayscale and Gaussian blur;

`fill: auto` fills with each image's own background, the median colour of its one-pixel border
as it reaches the step that fills (`border_colour`): light strokes on black get black borders,
dark strokes on a cream page get cream ones, with no assumption about the data set.
4. to tensor, normalize with the backbone's mean/std (averaged to one value for grayscale);
   train only: timm's random erasing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypedDict

from timm.data import create_transform
from timm.data.transforms import CenterCropOrPad, MaybeToTensor, str_to_interp_mode
from torchvision.transforms import InterpolationMode, v2

from retrieval.config import AugmentConfig
from retrieval.core.preprocess import Preprocess
from retrieval.errors import UserError
from retrieval.images import Fill, border_colour, fill_value

__all__ = [
    "ModelDataConfig",
    "border_colour",
    "build_eval_transform",
    "build_train_transform",
    "channel_stats",
    "describe_eval_transform",
]


class ModelDataConfig(TypedDict, total=False):
    """A backbone's preprocessing as timm resolves it (`timm.data.resolve_model_data_config`), the keys read here.

    timm returns a plain dict with these keys; a caller may give only `mean` and `std` (the rest default).
    """

    input_size: tuple[int, int, int]  # (C, H, W) the backbone was trained at
    interpolation: str  # timm's resampling name (bilinear, bicubic, ...)
    mean: tuple[float, ...]  # per channel, on pixels scaled to [0, 1]
    std: tuple[float, ...]
    crop_pct: float
    crop_mode: str


# A geometry step (a PIL image in, a PIL image out) built for one fill colour.
_FilledStep = Callable[[Fill], Callable[[Any], Any]]


def channel_stats(data_config: ModelDataConfig, in_chans: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) per input channel: timm's values, averaged over RGB for grayscale (`in_chans` 1).

    Raises:
        UserError: for `in_chans` other than 1 or 3 (image files are read as grayscale or RGB).

    Example:
        >>> channel_stats({"mean": (0.25, 0.5, 0.75), "std": (0.25, 0.25, 0.25)}, 1)
        ((0.5,), (0.25,))
    """
    if in_chans not in (1, 3):
        raise UserError(f"model.in_chans={in_chans}: images are read as grayscale or RGB; set model.in_chans to 1 or 3")
    mean, std = tuple(float(m) for m in data_config["mean"]), tuple(float(s) for s in data_config["std"])
    if len(mean) != in_chans:
        mean, std = (sum(mean) / len(mean),) * in_chans, (sum(std) / len(std),) * in_chans
    return mean, std


def build_train_transform(
    augment: AugmentConfig, image_size: int, data_config: ModelDataConfig, in_chans: int
) -> Callable[[Any], Any]:
    """The training pipeline: geometry, affine, flip, photometric noise, normalize, erasing.

    Args:
        augment: the resolved augmentation knobs.
        image_size: side of the square output in pixels.
        data_config: the backbone's timm preprocessing (`mean`, `std`, `interpolation`).
        in_chans: 1 (grayscale) or 3 (RGB).

    Returns:
        A callable mapping a PIL image or `(C, H, W)` tensor to a float tensor `(in_chans, S, S)`.
    """
    mean, std = channel_stats(data_config, in_chans)
    interpolation = data_config.get("interpolation", "bilinear")
    # timm builds the crop, auto-augment, colour jitter, normalization and erasing; flip is ours
    # (after the affine), so timm's hflip is off.
    crop, photometric, to_tensor = create_transform(
        image_size,
        is_training=True,
        separate=True,
        scale=augment.crop_scale,
        ratio=augment.crop_ratio,
        hflip=0.0,
        # timm adds no ColorJitter for None (0 would add one that draws random numbers); its hint omits None.
        color_jitter=_color_jitter(augment),  # type: ignore[arg-type]
        grayscale_prob=augment.grayscale,
        gaussian_blur_prob=augment.blur,
        auto_augment=augment.auto_augment,
        interpolation=interpolation,
        mean=mean,
        std=std,
        re_prob=augment.random_erasing,
    )
    geometry = [crop] if augment.crop_scale is not None else _eval_geometry(augment, image_size, interpolation, mean)
    steps: list[Callable] = [*_to_image(in_chans), *geometry]
    if augment.affine_degrees or augment.affine_translate or augment.affine_scale != (1.0, 1.0) or augment.affine_shear:

        def affine(fill: Fill) -> Callable[[Any], Any]:
            return v2.RandomAffine(
                degrees=augment.affine_degrees,
                translate=(augment.affine_translate,) * 2 if augment.affine_translate else None,
                scale=augment.affine_scale,
                shear=augment.affine_shear or None,
                interpolation=InterpolationMode.BILINEAR,
                fill=fill,
            )

        steps.append(_filled(affine, augment.fill, mean))
    if augment.hflip > 0:
        steps.append(v2.RandomHorizontalFlip(p=augment.hflip))
    return v2.Compose([*steps, photometric, to_tensor])


def _color_jitter(augment: AugmentConfig) -> tuple[float, ...] | None:
    """timm's ColorJitter strengths (brightness, contrast, saturation[, hue]); None when there is none."""
    if not augment.color_jitter:
        return None
    return (augment.color_jitter,) * 3 + ((augment.hue_jitter,) if augment.hue_jitter else ())


def build_eval_transform(
    augment: AugmentConfig, image_size: int, data_config: ModelDataConfig, in_chans: int
) -> Callable[[Any], Any]:
    """The evaluation pipeline: `augment.eval_mode` geometry, then normalize (deterministic).

    Arguments and result as `build_train_transform`.
    """
    mean, std = channel_stats(data_config, in_chans)
    interpolation = data_config.get("interpolation", "bilinear")
    geometry = _eval_geometry(augment, image_size, interpolation, mean)
    return v2.Compose([*_to_image(in_chans), *geometry, MaybeToTensor(), v2.Normalize(mean=list(mean), std=list(std))])


def describe_eval_transform(
    augment: AugmentConfig, image_size: int, data_config: ModelDataConfig, in_chans: int
) -> Preprocess:
    """What `build_eval_transform` does, as data: what an index records, an export writes and onnxruntime is fed by.

    A named fill becomes its pixel values (`auto` stays: each image's own border colour).

    Example:
        >>> from retrieval.config import resolve_augment
        >>> record = describe_eval_transform(resolve_augment({"preset": "glyph"}, "csv"), 64,
        ...                                  {"mean": (0.5,) * 3, "std": (0.5,) * 3}, 1)
        >>> record.resize_mode, record.image_size, record.channels, record.mean
        ('resize', 64, 'L', (0.5,))
    """
    mean, std = channel_stats(data_config, in_chans)
    fill = augment.fill if augment.eval_mode == "pad_square" else None
    return Preprocess.model_validate(  # the backbone's interpolation is a str: checked against Pillow's filters here
        {
            "image_size": image_size,
            "resize_mode": augment.eval_mode,
            "interpolation": data_config.get("interpolation", "bilinear"),
            "channels": "L" if in_chans == 1 else "RGB",
            "mean": mean,
            "std": std,
            "crop_pct": augment.crop_pct if augment.eval_mode == "center_crop" else None,
            "fill": fill if fill in (None, "auto") else fill_value(fill, mean),
        }
    )


def _to_image(in_chans: int) -> list[Callable]:
    """Tensors become PIL images (PIL images pass through), then grayscale or RGB as the model expects."""
    return [v2.ToPILImage(), v2.Grayscale(num_output_channels=1) if in_chans == 1 else v2.RGB()]


class _BorderFilled:
    """A geometry step filled with each image's own `border_colour` (`fill: auto`)."""

    def __init__(self, make_step: _FilledStep) -> None:
        self.make_step = make_step

    def __call__(self, image: Any) -> Any:
        return self.make_step(border_colour(image))(image)


def _filled(make_step: _FilledStep, fill: str, mean: tuple[float, ...]) -> Callable[[Any], Any]:
    """`make_step` with the configured fill: a fixed colour, or each image's own background for `auto`."""
    return _BorderFilled(make_step) if fill == "auto" else make_step(fill_value(fill, mean))


def _eval_geometry(
    augment: AugmentConfig, image_size: int, interpolation: str, mean: tuple[float, ...]
) -> list[Callable]:
    mode = str_to_interp_mode(interpolation)
    if augment.eval_mode == "center_crop":
        # timm's eval: the shorter side to size / crop_pct, then the central size x size.
        return [v2.Resize(math.floor(image_size / augment.crop_pct), interpolation=mode), v2.CenterCrop(image_size)]
    if augment.eval_mode == "resize":
        return [v2.Resize((image_size, image_size), interpolation=mode)]

    # pad_square: the longer side to size, the shorter one padded evenly with the fill colour.
    def pad(fill: Fill) -> Callable[[Any], Any]:
        return CenterCropOrPad(image_size, fill=fill)

    return [v2.Resize(None, max_size=image_size, interpolation=mode), _filled(pad, augment.fill, mean)]
