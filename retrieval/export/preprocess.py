"""A checkpoint's evaluation preprocessing as data (`preprocess.json`), applied with Pillow and numpy alone.

`retrieval.data.transforms.build_eval_transform` builds the eval pipeline from torchvision and
timm; an export writes what that pipeline does as a `Preprocess`, and `Preprocess.__call__`
repeats it step by step with the same Pillow calls, so the pixels reaching the ONNX model are
the ones that reach the PyTorch model (tests compare them):

1. the image (already upright, transparency on white: `retrieval.images.flatten_image`) converted
   to `channels` (`L` or `RGB`), as `Grayscale(1)` / `RGB()` do;
2. geometry by `resize_mode`: `center_crop` resizes the shorter side to `floor(image_size / crop_pct)`
   and crops the central square; `resize` squashes the image to the square; `pad_square` resizes the
   longer side to `image_size` and pads the shorter one evenly with `fill` (pixel values, or `auto`:
   the median colour of the resized image's border, `retrieval.images.border_colour`). Sizes are
   torchvision's (`int()` truncation, the crop's offset rounded half to even), resizing is Pillow's
   `Image.resize` with `interpolation` (antialiased, as torchvision does for PIL images);
3. pixels to float32 in [0, 1] (`/ 255`), then `(x - mean) / std` per channel, in `(C, H, W)` order.

No torch import here or in anything imported: a deployment runs it with numpy and Pillow.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps
from pydantic import ConfigDict

from retrieval.errors import UserError
from retrieval.images import Fill, border_colour, fill_value
from retrieval.inference.eval_sizes import resized_size
from retrieval.validation import Record, ValidationError, user_error

__all__ = ["MAX_IMAGE_SIZE", "MIN_STD", "PREPROCESS_FORMAT", "RESIZE_MODES", "Preprocess"]

PREPROCESS_FORMAT = 1  # version of the preprocess.json layout
# The largest `image_size` read. Retrieval backbones are run at a few hundred pixels; one 4096-pixel
# RGB input is already 200 MB of float32, so a larger value is a broken file, not a model, and
# refusing it beats Pillow resizing every image towards gigabytes until memory runs out.
MAX_IMAGE_SIZE = 4096
# The smallest `std`: normalization stds are 0.2 to 0.5; a pixel divided by 1e-45 is infinite, and the
# model's embedding NaN. Under 1e-3, (x - mean) / std would exceed 1,000 for a pixel in [0, 1].
MIN_STD = 1e-3
RESIZE_MODES = ("center_crop", "resize", "pad_square")
# timm's interpolation names -> Pillow's resampling filters (torchvision maps them the same way for PIL images).
_RESAMPLING = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
    "lanczos": Image.Resampling.LANCZOS,
}


@dataclass(frozen=True)
class Preprocess:
    """The eval transform of one model: a decoded image -> the model's `(C, image_size, image_size)` float32 input."""

    image_size: int  # side of the square the model sees, in pixels
    resize_mode: str  # one of RESIZE_MODES (the run's `augment.eval_mode`)
    interpolation: str  # a key of _RESAMPLING (the backbone's timm `interpolation`)
    channels: str  # `L` (in_chans 1) or `RGB` (in_chans 3)
    mean: tuple[float, ...]  # per channel, on pixels scaled to [0, 1]
    std: tuple[float, ...]
    crop_pct: float | None = None  # center_crop only: the crop's share of the resized shorter side
    fill: str | Fill | None = None  # pad_square only: `auto` or 8-bit pixel values of the padding

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.image_size <= MAX_IMAGE_SIZE:
            problems.append(f"image_size {self.image_size} (must be 1 to {MAX_IMAGE_SIZE})")
        if self.resize_mode not in RESIZE_MODES:
            problems.append(f"resize_mode {self.resize_mode!r} (one of {', '.join(RESIZE_MODES)})")
        if self.interpolation not in _RESAMPLING:
            problems.append(f"interpolation {self.interpolation!r} (one of {', '.join(_RESAMPLING)})")
        if self.channels not in ("L", "RGB") or len(self.mean) != self.in_chans or len(self.std) != self.in_chans:
            problems.append(f"channels {self.channels!r} with {len(self.mean)} means and {len(self.std)} stds")
        if not all(0 <= value <= 1 for value in self.mean):  # NaN fails too
            problems.append(f"mean {list(self.mean)} (finite numbers in [0, 1]: of pixels scaled to [0, 1])")
        if not all(MIN_STD <= value <= 1 for value in self.std):
            problems.append(
                f"std {list(self.std)} (finite and > 0: from {MIN_STD} to 1, as pixels in [0, 1] are divided by it)"
            )
        if self.resize_mode == "center_crop" and not (
            self.crop_pct and 0 < self.crop_pct <= 1 and self.image_size / self.crop_pct < MAX_IMAGE_SIZE + 1
        ):
            problems.append(
                f"crop_pct {self.crop_pct} (center_crop needs 0 < crop_pct <= 1 and image_size / crop_pct, the "
                f"side it resizes to, at most {MAX_IMAGE_SIZE})"
            )
        if self.resize_mode == "pad_square" and not _is_fill(self.fill, self.in_chans):
            problems.append(f"fill {self.fill!r} (pad_square needs `auto` or one value per channel, 0-255)")
        if problems:
            raise UserError(f"invalid preprocess.json: {'; '.join(problems)}; export the model again")

    @property
    def in_chans(self) -> int:
        """Input channels of the model: 1 for `L`, 3 for `RGB`."""
        return 1 if self.channels == "L" else 3

    @classmethod
    def from_description(cls, info: dict[str, Any]) -> Preprocess:
        """The transform `retrieval.data.transforms.describe_eval_transform` describes, its fill as pixel values."""
        mean = tuple(float(value) for value in info["mean"])
        fill = info.get("fill")
        return cls(
            image_size=int(info["image_size"]),
            resize_mode=str(info["eval_mode"]),
            interpolation=str(info["interpolation"]),
            channels=str(info["mode"]),
            mean=mean,
            std=tuple(float(value) for value in info["std"]),
            crop_pct=info.get("crop_pct"),
            fill=fill if fill in (None, "auto") else fill_value(fill, mean),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocess:
        """The `Preprocess` written by `to_dict` (a `preprocess.json`).

        The JSON types are read strictly (`_PreprocessFile`): `image_size` `"32"`, `32.7` or `true`
        is refused, not read as 32 or 1.

        Raises:
            UserError: a field is missing, unknown, of the wrong type or out of range (naming it), or
                the file is of a newer format.
        """
        if data.get("format") != PREPROCESS_FORMAT:
            raise UserError(
                f"preprocess.json has format {data.get('format')!r}, this version reads {PREPROCESS_FORMAT}; "
                "export the model again with this version of retrieval"
            )
        try:
            record = _PreprocessFile.model_validate(data)
        except ValidationError as exc:
            raise user_error(_PreprocessFile, exc, "preprocess.json", "export the model again") from None
        return cls(
            image_size=record.image_size,
            resize_mode=record.resize_mode,
            interpolation=record.interpolation,
            channels=record.channels,
            mean=tuple(record.mean),
            std=tuple(record.std),
            crop_pct=record.crop_pct,
            fill=tuple(record.fill) if isinstance(record.fill, list) else record.fill,  # type: ignore[arg-type]
        )

    @classmethod
    def read(cls, path: str | Path) -> Preprocess:
        """Read a `preprocess.json`.

        Raises:
            UserError: the file is missing, is not JSON, or is not a valid preprocess description.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
            raise UserError(f"cannot read {path} ({exc.__class__.__name__}); export the model again") from exc
        if not isinstance(data, dict):
            raise UserError(f"{path} is not a JSON object; export the model again")
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with the format version and the input layout the model takes."""
        return {
            "format": PREPROCESS_FORMAT,
            "image_size": self.image_size,
            "resize_mode": self.resize_mode,
            "crop_pct": self.crop_pct,
            "fill": list(self.fill) if isinstance(self.fill, tuple) else self.fill,
            "interpolation": self.interpolation,
            "channels": self.channels,
            "in_chans": self.in_chans,
            "mean": list(self.mean),
            "std": list(self.std),
            "input": {"layout": "NCHW", "dtype": "float32", "scale": "1/255, then (x - mean) / std"},
        }

    def __call__(self, image: Image.Image) -> np.ndarray:
        """A flattened image (`RGB` or `L`) -> `(in_chans, image_size, image_size)` float32 model input."""
        image = image if image.mode == self.channels else image.convert(self.channels)
        image = self._geometry(image)
        pixels = np.asarray(image, dtype=np.uint8).astype(np.float32) / np.float32(255)
        pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        mean = np.asarray(self.mean, dtype=np.float32)[:, None, None]
        std = np.asarray(self.std, dtype=np.float32)[:, None, None]
        return np.ascontiguousarray((pixels - mean) / std)

    def batch(self, images: Sequence[Image.Image]) -> np.ndarray:
        """`(B, in_chans, image_size, image_size)` float32 inputs of flattened images."""
        size = self.image_size
        if not images:
            return np.zeros((0, self.in_chans, size, size), dtype=np.float32)
        return np.stack([self(image) for image in images])

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """The size its resize gives a `width` x `height` image, before the crop or pad (`eval_sizes.resized_size`)."""
        return resized_size(self.resize_mode, self.image_size, self.crop_pct, (width, height))

    def _geometry(self, image: Image.Image) -> Image.Image:
        size = self.image_size
        image = self._resize(image, self.resized_size(*image.size))
        if self.resize_mode == "resize":
            return image
        if self.resize_mode == "center_crop":
            return _center_crop_or_pad(image, size, 0)
        fill = self.fill if isinstance(self.fill, int | tuple) else border_colour(image)  # else: `auto`
        return _center_crop_or_pad(image, size, fill)

    def _resize(self, image: Image.Image, width_height: tuple[int, int]) -> Image.Image:
        """Pillow's resize, skipped when the size is already right (as torchvision skips it)."""
        if image.size == width_height:
            return image
        return image.resize(width_height, resample=_RESAMPLING[self.interpolation])


class _PreprocessFile(Record):
    """`preprocess.json` as JSON types, read strictly; `Preprocess` checks the values and how they fit together."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: int
    image_size: int
    resize_mode: str
    crop_pct: float | None = None
    fill: str | int | list[int] | None = None  # `auto`, a gray level or [red, green, blue]; null: no padding
    interpolation: str
    channels: str
    in_chans: int | None = None  # what `channels` means, written for readers of the file
    mean: list[float]
    std: list[float]
    input: dict[str, Any] | None = None  # the input layout, written for readers of the file


def _is_fill(fill: str | Fill | None, in_chans: int) -> bool:
    """Whether `fill` pads an image of `in_chans` channels: `auto`, or 8-bit values (one, or three for RGB)."""
    if fill == "auto":
        return True
    if isinstance(fill, int):
        values: tuple[int, ...] = (fill,)
    elif isinstance(fill, tuple) and len(fill) == in_chans == 3:
        values = fill
    else:
        return False
    return all(isinstance(value, int) and 0 <= value <= 255 for value in values)


def _center_crop_or_pad(image: Image.Image, size: int, fill: Fill) -> Image.Image:
    """The central `size` x `size` square, padding evenly with `fill` where the image is smaller (timm's)."""
    width, height = image.size
    if width < size or height < size:
        pad_x, pad_y = max(size - width, 0), max(size - height, 0)
        border = (pad_x // 2, pad_y // 2, (pad_x + 1) // 2, (pad_y + 1) // 2)
        colour = (fill,) * 3 if isinstance(fill, int) and image.mode == "RGB" else fill
        image = ImageOps.expand(image, border=border, fill=colour)
        width, height = image.size
        if (width, height) == (size, size):
            return image
    top, left = round((height - size) / 2.0), round((width - size) / 2.0)
    return image.crop((left, top, left + size, top + size))
