"""Render a zero-shot, cross-style colour emoji retrieval dataset from emoji artwork Debian packages install.

Classes are single-code-point emoji that EVERY pinned artwork set draws (`STYLES`, four styles):

- `noto`: Google's Noto Color Emoji (fonts-noto-color-emoji 2.042, its 109 px colour bitmaps);
- `emojione`: EmojiOne's flat 64 px PNGs as ruby-gemojione 3.3.0 ships them (`assets/png/<CODE>.png`);
- `emojify`: the glossy, shaded 64 px PNGs of emojify.js (libjs-emojify 1.1.0), named by short name
  (`+1.png`, `8ball.png`) and mapped to code points through ruby-gemojione's `config/index.json`
  (its keys first, then short names, then aliases);
- `symbola`: Symbola's monochrome outlines (fonts-symbola 2.60), each image inked in a random colour.

Classes are shuffled with the seed and split into disjoint `test`, `val` and `train` sets
(zero-shot: no test or val class is seen in training).

Protocol: a test or val class is queried with images of ONE style (`--query-style`, default
`noto`) and searched against a gallery drawn from the other styles only, so a query never has an
image of its own style in the gallery. Val rows mirror the test protocol so model selection
measures what the test measures. Training rows use every style, cycling through them.

Each image is an RGB `size x size` PNG: the artwork cropped to its ink, scaled so its longer side
is a random share of the cell, rotated by a small random angle, shifted off centre and laid on a
random light background colour, drawn from a generator seeded by (seed, code point): the output
depends only on the arguments.

    python tools/make_emoji_dataset.py --out /data/emoji            # dataset.csv + images/
    retrieval train --config configs/csv_glyph.yaml --set model.in_chans=3 --set data.path=/data/emoji/dataset.csv

Artwork: the dataset is drawn from the pinned files (`STYLES`, under /usr/share) and from no
other, so it is the same on every machine that has them. Every style is required: a missing one
stops the tool, naming the Debian packages to install (`ARTWORK_PACKAGES`: fonts-noto-color-emoji
ruby-gemojione libjs-emojify fonts-symbola).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from cross_style_dataset import (
    add_size_arguments,
    cross_style_plan,
    print_counts,
    size_options,
    split_classes,
    write_dataset,
)
from fontTools.ttLib import TTFont
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "ARTWORK_PACKAGES",
    "ARTWORK_ROOT",
    "STYLES",
    "FontStyle",
    "MissingArtwork",
    "PngStyle",
    "Style",
    "emoji_classes",
    "find_styles",
    "main",
    "make_dataset",
    "render",
]

ARTWORK_ROOT = Path("/usr/share")
_GEMOJIONE = "rubygems-integration/all/gems/gemojione-3.3.0"

# style -> (kind, path under ARTWORK_ROOT, Debian packages that install it).
STYLES: dict[str, tuple[str, str, str]] = {
    "noto": ("colour font", "fonts/truetype/noto/NotoColorEmoji.ttf", "fonts-noto-color-emoji"),
    "emojione": ("png by code point", f"{_GEMOJIONE}/assets/png", "ruby-gemojione"),
    "emojify": ("png by short name", "javascript/emojify.js/images/emoji", "libjs-emojify ruby-gemojione"),
    "symbola": ("outline font", "fonts/truetype/ancient-scripts/Symbola_hint.ttf", "fonts-symbola"),
}
_SHORT_NAMES = f"{_GEMOJIONE}/config/index.json"  # short name -> code points, for the emojify PNGs
ARTWORK_PACKAGES = tuple(sorted({name for *_, packages in STYLES.values() for name in packages.split()}))

_SIZE_RANGE = (0.62, 0.90)  # the artwork's longer side, a fraction of the cell
_ROTATION = 12.0  # largest rotation, degrees either way
_SHIFT = 1 / 12  # largest offset from the centre, fraction of the cell
_BACKGROUND_LOW = 160  # background channels are drawn from [this, 255]: light, any hue
_INK_HIGH = 180  # a monochrome style's ink channels are drawn from [0, this]: visible on the light backgrounds
_NOTO_SIZE = 109  # the one size of Noto Color Emoji's bitmap strike
_OUTLINE_SIZE = 128  # outline fonts are drawn this large, then scaled down like the bitmaps


class Style(Protocol):
    """One artwork set: the code points it draws and each one's picture (RGBA, cropped to its ink)."""

    name: str
    monochrome: bool  # black ink: `render` colours it

    def cover(self) -> frozenset[int]:
        """The code points this style draws."""
        ...

    def draw(self, code: int) -> Image.Image:
        """`code`'s artwork as RGBA, transparent around it, cropped to the ink."""
        ...


@dataclass(frozen=True)
class FontStyle:
    """Emoji drawn by a font: colour bitmaps (`monochrome=False`, CBDT) or outlines (black ink)."""

    name: str
    path: Path
    size: int
    monochrome: bool

    def cover(self) -> frozenset[int]:
        """The font's cmap."""
        return _cmap(self.path)

    def draw(self, code: int) -> Image.Image:
        """The glyph on a canvas large enough for any emoji, cropped to its ink."""
        canvas = 3 * self.size
        font = _font(self.path, self.size)
        if self.monochrome:
            mask = Image.new("L", (canvas, canvas), 0)
            ImageDraw.Draw(mask).text((self.size, self.size), chr(code), fill=255, font=font)
            image = Image.new("RGBA", mask.size, (0, 0, 0, 0))
            image.putalpha(mask)
        else:
            image = Image.new("RGBA", (canvas, canvas), (0, 0, 0, 0))
            ImageDraw.Draw(image).text((self.size, self.size), chr(code), font=font, embedded_color=True)
        return _crop_to_ink(image)


@dataclass(frozen=True)
class PngStyle:
    """Emoji drawn as one PNG file each."""

    name: str
    files: tuple[tuple[int, Path], ...]  # (code point, file), sorted by code point
    monochrome: bool = False

    def cover(self) -> frozenset[int]:
        """The code points that have a file."""
        return frozenset(code for code, _ in self.files)

    def draw(self, code: int) -> Image.Image:
        """The file as RGBA, cropped to its ink."""
        with Image.open(dict(self.files)[code]) as image:
            return _crop_to_ink(image.convert("RGBA"))


class MissingArtwork(RuntimeError):
    """Some pinned artwork is not installed; the message names the styles and the packages to install."""


def find_styles(root: Path = ARTWORK_ROOT) -> list[Style]:
    """Every pinned style in `STYLES` order, read from under `root`.

    Raises:
        MissingArtwork: a style's font, folder or short-name index is missing; the dataset would then
            depend on what this machine happens to have, so nothing is drawn.
    """
    missing = [name for name, (_, path, _) in STYLES.items() if not (root / path).exists()]
    if not (root / _SHORT_NAMES).is_file() and "emojify" not in missing:
        missing.append("emojify")
    if missing:
        packages = sorted({package for name in missing for package in STYLES[name][2].split()})
        raise MissingArtwork(
            f"emoji artwork not installed under {root}: {', '.join(missing)}; "
            f"install it with: apt-get install {' '.join(packages)}"
        )
    png_by_code = {
        int(path.stem, 16): path for path in (root / STYLES["emojione"][1]).glob("*.png") if "-" not in path.stem
    }
    return [
        FontStyle("noto", root / STYLES["noto"][1], _NOTO_SIZE, monochrome=False),
        PngStyle("emojione", tuple(sorted(png_by_code.items()))),
        PngStyle("emojify", tuple(sorted(_short_name_files(root).items()))),
        FontStyle("symbola", root / STYLES["symbola"][1], _OUTLINE_SIZE, monochrome=True),
    ]


def _short_name_files(root: Path) -> dict[int, Path]:
    """emojify's PNGs by the single code point their short name stands for (the first name, sorted, wins)."""
    index = json.loads((root / _SHORT_NAMES).read_text())
    names_of = {
        key: ([key], [entry["shortname"].strip(":")], [alias.strip(":") for alias in entry["aliases"]])
        for key, entry in index.items()
    }
    code_of: dict[str, str] = {}
    for rank in range(3):  # keys, then short names, then aliases: a name that is one emoji's key keeps it
        for key, entry in index.items():
            for name in names_of[key][rank]:
                code_of.setdefault(name, entry["unicode"])
    files: dict[int, Path] = {}
    for path in sorted((root / STYLES["emojify"][1]).glob("*.png")):
        code = code_of.get(path.stem, "-")
        if "-" not in code:
            files.setdefault(int(code, 16), path)
    return files


def emoji_classes(styles: Sequence[Style]) -> list[int]:
    """Code points every style draws with some ink, in code point order (cached: it draws every one)."""
    return list(_emoji_classes(tuple(styles)))


@functools.lru_cache(maxsize=4)
def _emoji_classes(styles: tuple[Style, ...]) -> tuple[int, ...]:
    cover = frozenset.intersection(*(style.cover() for style in styles))
    return tuple(code for code in sorted(cover) if all(min(_art(style, code).size) > 1 for style in styles))


def render(style: Style, code: int, cell: int, rng: np.random.Generator) -> Image.Image:
    """An RGB `cell x cell` image of `code` in `style`: jittered size, angle, offset and background colour."""
    share = rng.uniform(*_SIZE_RANGE)
    angle = rng.uniform(-_ROTATION, _ROTATION)
    dx, dy = rng.uniform(-_SHIFT, _SHIFT, size=2) * cell
    background = tuple(int(v) for v in rng.integers(_BACKGROUND_LOW, 256, size=3))
    ink = tuple(int(v) for v in rng.integers(0, _INK_HIGH + 1, size=3))  # drawn for every style: one stream
    art = _art(style, code)
    if style.monochrome:
        coloured = Image.new("RGBA", art.size, (*ink, 255))
        coloured.putalpha(art.getchannel("A"))
        art = coloured
    scale = share * cell / max(art.size)
    # Premultiplied alpha, so resampling does not pull the transparent pixels' colour into the edges.
    art = art.convert("RGBa").resize(
        (max(1, round(art.width * scale)), max(1, round(art.height * scale))), Image.Resampling.LANCZOS
    )
    art = art.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True).convert("RGBA")
    image = Image.new("RGB", (cell, cell), background)
    image.paste(art, (round((cell - art.width) / 2 + dx), round((cell - art.height) / 2 + dy)), art)
    return image


def make_dataset(
    out: Path,
    *,
    cell: int = 64,
    train_classes: int = 270,
    val_classes: int = 80,
    test_classes: int = 80,
    train_per_class: int = 15,
    queries_per_class: int = 2,
    gallery_per_class: int = 6,
    seed: int = 0,
    query_style: str = "noto",
    styles: Sequence[Style] | None = None,
) -> dict[str, int]:
    """Write `out/images/<split>/*.png` and `out/dataset.csv`; returns the number of rows per split.

    Image names are `u<code>_<n>_<style>.png`, so the style of every row can be read back.
    """
    try:
        styles = list(styles if styles is not None else find_styles())
    except MissingArtwork as exc:
        raise SystemExit(f"error: {exc}") from None
    names = [style.name for style in styles]
    if query_style not in names:
        raise SystemExit(f"error: --query-style {query_style!r} is not one of: {', '.join(names)}")
    query = [style for style in styles if style.name == query_style]
    gallery = [style for style in styles if style.name != query_style]
    if not gallery:
        raise SystemExit("error: the gallery needs a style other than the query style; install every style")

    plan = cross_style_plan(styles, query, gallery, train_per_class, queries_per_class, gallery_per_class)
    splits = split_classes(emoji_classes(styles), seed, train_classes, val_classes, test_classes)
    return write_dataset(
        out,
        splits,
        seed,
        int,
        plan,
        lambda code, style, rng: render(style, code, cell, rng),
        suffix=lambda style: f"_{style.name}",
    )


@functools.lru_cache(maxsize=32)
def _art(style: Style, code: int) -> Image.Image:
    """`style.draw(code)`, cached: a class's images reuse one drawing (callers never modify it)."""
    return style.draw(code)


def _crop_to_ink(image: Image.Image) -> Image.Image:
    box = image.getchannel("A").getbbox()
    return image.crop(box) if box else Image.new("RGBA", (1, 1), (0, 0, 0, 0))


@functools.lru_cache(maxsize=8)
def _font(path: Path, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), size)


@functools.lru_cache(maxsize=8)
def _cmap(path: Path) -> frozenset[int]:
    with TTFont(str(path), lazy=True) as font:
        return frozenset(font.getBestCmap())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_arguments(
        parser,
        size=64,
        classes=(270, 80, 80),
        train_per_class=15,
        gallery_per_class=6,
        styles="styles",
        query_styles="query style",
    )
    parser.add_argument("--query-style", default="noto", choices=list(STYLES), help="the queries' style")
    args = parser.parse_args(argv)
    print_counts(args, make_dataset(args.out, **size_options(args), query_style=args.query_style))


if __name__ == "__main__":
    main()
