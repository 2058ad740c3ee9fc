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
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from PIL import Image, ImageOps
from pydantic import (
    ConfigDict,
    Field,
    JsonValue,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    computed_field,
    model_validator,
)

from retrieval.core.eval_sizes import resized_size
from retrieval.errors import UserError
from retrieval.images import Fill, border_colour
from retrieval.validation import Record, ValidationError, Worded, accepts, user_error

__all__ = ["MAX_IMAGE_SIZE", "MIN_STD", "PREPROCESS_FORMAT", "RESIZE_MODES", "InputLayout", "Preprocess"]

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
_FIX = "export the model again"
# Sequences: a JSON array or a tuple (`fill_value`'s), each item of the exact JSON type.
_Means = Annotated[
    tuple[StrictFloat, ...],
    Field(strict=False),
    accepts(lambda values: all(0 <= value <= 1 for value in values), "finite numbers in [0, 1] (of pixels in [0, 1])"),
]
_Stds = Annotated[
    tuple[StrictFloat, ...],
    Field(strict=False),
    accepts(
        lambda values: all(MIN_STD <= value <= 1 for value in values),
        f"numbers from {MIN_STD} to 1 (pixels in [0, 1] are divided by them)",
    ),
]
_Rgb = Annotated[tuple[StrictInt, StrictInt, StrictInt], Field(strict=False)]


class InputLayout(Record):
    """The model input's layout, written into preprocess.json for its readers (this toolkit does not read it)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    layout: str = "NCHW"
    dtype: str = "float32"
    scale: str = "1/255, then (x - mean) / std"


class Preprocess(Record):
    """The eval transform of one model: a decoded image -> the model's `(C, image_size, image_size)` float32 input.

    `preprocess.json` is this record as JSON (`read`, `to_dict`); its types are read strictly
    (`image_size` `"32"`, `32.7` or `true` is refused, not read as 32 or 1), its ranges and the
    way its fields fit together (a mean and a std per channel, a crop for `center_crop`, a fill
    for `pad_square`) checked, each error one line naming the field.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format: int = PREPROCESS_FORMAT
    image_size: Annotated[
        int, accepts(lambda size: 1 <= size <= MAX_IMAGE_SIZE, f"an integer from 1 to {MAX_IMAGE_SIZE}")
    ]  # side of the square the model sees, in pixels
    resize_mode: Literal["center_crop", "resize", "pad_square"]  # the run's `augment.eval_mode`
    crop_pct: float | None = None  # center_crop only: the crop's share of the resized shorter side
    fill: Annotated[  # pad_square only: `auto` or 8-bit pixel values
        Literal["auto"] | StrictInt | _Rgb | None, Worded("auto, a gray level 0-255, [red, green, blue] or null")
    ] = None
    interpolation: Literal["nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"]  # the backbone's timm one
    channels: Literal["L", "RGB"]  # `L` (in_chans 1) or `RGB` (in_chans 3)
    mean: _Means  # per channel, on pixels scaled to [0, 1]
    std: _Stds
    input: InputLayout = Field(default_factory=InputLayout)  # the input layout, written for readers of the file

    @model_validator(mode="before")
    @classmethod
    def _derived_keys(cls, data: Any, info: ValidationInfo) -> Any:
        """Leave out `in_chans`: written for readers, it is what `channels` says (checked to agree, if given)."""
        if not isinstance(data, dict) or "in_chans" not in data:
            return data
        data = dict(data)
        written = data.pop("in_chans")
        expected = {"L": 1, "RGB": 3}.get(data.get("channels"))
        if expected is not None and (type(written) is not int or written != expected):
            where = (info.context or {}).get("where", "preprocess")
            raise UserError(
                f"{where}.in_chans must be {expected} (channels {data['channels']}), got {written!r}; {_FIX}"
            )
        return data

    @model_validator(mode="after")
    def _fits_together(self, info: ValidationInfo) -> Preprocess:
        """The rules over several fields, as a `UserError` naming the file (`context={"where": ...}`)."""
        where = (info.context or {}).get("where", "preprocess")
        problem = _misfit(self)
        if problem:
            raise UserError(f"{where}.{problem}; {_FIX}")
        return self

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form
    @property
    def in_chans(self) -> int:
        """Input channels of the model: 1 for `L`, 3 for `RGB`."""
        return 1 if self.channels == "L" else 3

    @classmethod
    def read(cls, path: str | Path) -> Preprocess:
        """Read a `preprocess.json`.

        Raises:
            UserError: the file is missing, is not JSON, is of another format, or a field is missing,
                unknown, of the wrong type or out of range (naming it).
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
            raise UserError(f"cannot read {path} ({exc.__class__.__name__}); {_FIX}") from exc
        if not isinstance(data, dict):
            raise UserError(f"{path} is not a JSON object; {_FIX}")
        where = Path(path).name
        if data.get("format") != PREPROCESS_FORMAT:
            raise UserError(
                f"{where} has format {data.get('format')!r}, this version reads {PREPROCESS_FORMAT}; "
                "export the model again with this version of retrieval"
            )
        try:
            return cls.model_validate(data, context={"where": where})
        except ValidationError as exc:
            raise user_error(cls, exc, where, _FIX) from None

    def to_dict(self) -> dict[str, JsonValue]:
        """JSON-ready fields, with the format version and the input layout the model takes (preprocess.json)."""
        return self.model_dump(mode="json")

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


def _misfit(preprocess: Preprocess) -> str:
    """The first way `preprocess`'s fields do not fit together, as "FIELD must be ..., got ..."; "" when they fit."""
    channels = preprocess.in_chans
    if len(preprocess.mean) != channels or len(preprocess.std) != channels:
        counts = f"{len(preprocess.mean)} means and {len(preprocess.std)} stds"
        return f"mean must hold one value per channel ({channels} for channels {preprocess.channels}), got {counts}"
    crop = preprocess.crop_pct
    if preprocess.resize_mode == "center_crop" and not (
        crop and 0 < crop <= 1 and preprocess.image_size / crop < MAX_IMAGE_SIZE + 1
    ):
        return (
            f"crop_pct must be in (0, 1] for center_crop, with image_size / crop_pct (the side it resizes to) at "
            f"most {MAX_IMAGE_SIZE}, got {crop!r}"
        )
    if preprocess.resize_mode == "pad_square" and not _is_fill(preprocess.fill, channels):
        return f"fill must be `auto` or one value per channel (0-255) for pad_square, got {preprocess.fill!r}"
    return ""


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
