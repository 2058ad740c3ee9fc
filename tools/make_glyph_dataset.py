"""Render a zero-shot glyph retrieval dataset from the fonts Debian packages install.

Classes are characters (Latin, Latin-1 and Extended-A, Greek, Cyrillic, digits, punctuation,
symbols) that EVERY chosen font maps in its cmap, so no image is a tofu box. Characters that
render alike in most font families (Latin A, Greek Alpha, Cyrillic A; hyphen and U+2010) are
one class, the first by code point. Classes are shuffled with the seed and split into disjoint `test`,
`val` and `train` sets (zero-shot: no test or val class is seen in training).

Protocol: a test or val class is queried with images rendered in serif families and searched
against a gallery rendered in the other families (sans, mono, geometric), so a query never has
an image of its own font in the gallery. With `--query-family NAME` the queries are rendered in
that one family and the gallery in every other family (serifs included): an easier protocol, the
one of the 64 px dev benchmark. Val rows mirror the test protocol (same flags) so model
selection measures what the test measures. Training rows use every font.

Each image is a dark glyph on a light background (grayscale PNG), centred on the middle of the
font's ascender-descender box, with a per-image font size, offset and ink/paper level drawn
from a generator seeded by (seed, code point): the output depends only on the arguments.

    python tools/make_glyph_dataset.py --out /data/glyphs            # dataset.csv + images/
    retrieval train --config configs/csv_glyph.yaml --set data.path=/data/glyphs/dataset.csv

Fonts: the dataset is rendered from a pinned list of families (`FAMILIES`) and from no other
font, so it is the same on every machine that has them, whatever else is installed. Every family
is required: a missing one stops the tool, naming the Debian packages to install
(`FONT_PACKAGES`: fonts-dejavu-core fonts-dejavu-extra fonts-liberation2 fonts-freefont-ttf
fonts-noto-core fonts-noto-mono fonts-urw-base35).
"""

from __future__ import annotations

import argparse
import functools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
    "FAMILIES",
    "FONT_PACKAGES",
    "Font",
    "MissingFonts",
    "find_fonts",
    "glyph_classes",
    "main",
    "make_dataset",
    "render",
]

FONT_ROOT = Path("/usr/share/fonts")

# family -> (group, file globs under FONT_ROOT). Query images come from "serif", gallery images
# from "other". Regular, bold and italic styles of each family are all used.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "DejaVu Serif": ("serif", ("truetype/dejavu/DejaVuSerif*.ttf",)),
    "Liberation Serif": ("serif", ("truetype/liberation2/LiberationSerif-*.ttf",)),
    "FreeSerif": ("serif", ("truetype/freefont/FreeSerif*.ttf",)),
    "Noto Serif": ("serif", ("truetype/noto/NotoSerif-Regular.ttf", "truetype/noto/NotoSerif-Bold.ttf")),
    "C059": ("serif", ("opentype/urw-base35/C059-*.otf",)),
    "P052": ("serif", ("opentype/urw-base35/P052-*.otf",)),
    "Nimbus Roman": ("serif", ("opentype/urw-base35/NimbusRoman-*.otf",)),
    "URW Bookman": ("serif", ("opentype/urw-base35/URWBookman-*.otf",)),
    "DejaVu Sans": ("other", ("truetype/dejavu/DejaVuSans-*.ttf", "truetype/dejavu/DejaVuSans.ttf")),
    "DejaVu Sans Mono": ("other", ("truetype/dejavu/DejaVuSansMono*.ttf",)),
    "Liberation Sans": ("other", ("truetype/liberation2/LiberationSans-*.ttf",)),
    "Liberation Mono": ("other", ("truetype/liberation2/LiberationMono-*.ttf",)),
    "FreeSans": ("other", ("truetype/freefont/FreeSans*.ttf",)),
    "FreeMono": ("other", ("truetype/freefont/FreeMono*.ttf",)),
    "Noto Sans": ("other", ("truetype/noto/NotoSans-Regular.ttf", "truetype/noto/NotoSans-Bold.ttf")),
    "Noto Sans Mono": ("other", ("truetype/noto/NotoSansMono-Regular.ttf", "truetype/noto/NotoSansMono-Bold.ttf")),
    "Nimbus Sans": ("other", ("opentype/urw-base35/NimbusSans-*.otf",)),
    "Nimbus Sans Narrow": ("other", ("opentype/urw-base35/NimbusSansNarrow-*.otf",)),
    "Nimbus Mono PS": ("other", ("opentype/urw-base35/NimbusMonoPS-*.otf",)),
    "URW Gothic": ("other", ("opentype/urw-base35/URWGothic-*.otf",)),
}

# The Debian package that installs each family's files (FAMILIES' globs): what to install when one is missing.
_PACKAGE_OF_FOLDER = {
    "truetype/dejavu/DejaVu": "fonts-dejavu-core fonts-dejavu-extra",
    "truetype/liberation2/": "fonts-liberation2",
    "truetype/freefont/": "fonts-freefont-ttf",
    "truetype/noto/NotoSansMono": "fonts-noto-mono",
    "truetype/noto/NotoS": "fonts-noto-core",
    "opentype/urw-base35/": "fonts-urw-base35",
}
FONT_PACKAGES = tuple(sorted({name for names in _PACKAGE_OF_FOLDER.values() for name in names.split()}))


def _packages_of(patterns: Sequence[str]) -> list[str]:
    """The Debian packages that install files matching `patterns` (the longest matching prefix of each)."""
    found = {max((f for f in _PACKAGE_OF_FOLDER if p.startswith(f)), key=len) for p in patterns}
    return sorted({name for folder in found for name in _PACKAGE_OF_FOLDER[folder].split()})


# Unicode blocks the classes come from (the fonts' common cover decides what is left).
_BLOCKS = ((0x21, 0x7E), (0xA1, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x2010, 0x20CF), (0x2100, 0x22FF))
_KEPT_CATEGORIES = ("L", "N", "P", "S")  # letters, numbers, punctuation, symbols (no marks, spaces, controls)
_SIZE_RANGE = (0.56, 0.70)  # font size as a fraction of the cell
_SHIFT = 1 / 16  # largest offset from the centre, fraction of the cell
_DUPLICATE_RMS = 0.06  # renders closer than this (RMS over the cell, ink in 0..1) look the same
_DUPLICATE_SHARE = 0.5  # ... and characters that look the same in at least this share of families are one class


@dataclass(frozen=True)
class Font:
    """One font file and where it goes in the protocol."""

    path: Path
    family: str
    group: str  # "serif" (queries) or "other" (gallery)


class MissingFonts(RuntimeError):
    """Some pinned font families are not installed; the message names them and the packages to install."""


def find_fonts(root: Path = FONT_ROOT, families: dict[str, tuple[str, tuple[str, ...]]] = FAMILIES) -> list[Font]:
    """The font files of every family in `families`, sorted by family then path.

    Raises:
        MissingFonts: a family has no file under `root`; the dataset would then depend on which
            fonts this machine happens to have, so nothing is rendered.
    """
    fonts, missing = [], []
    for family, (group, patterns) in families.items():
        paths = sorted({path for pattern in patterns for path in root.glob(pattern)})
        fonts.extend(Font(path, family, group) for path in paths)
        if not paths:
            missing.append(family)
    if missing:
        packages = sorted({package for family in missing for package in _packages_of(families[family][1])})
        raise MissingFonts(
            f"font families not installed under {root}: {', '.join(missing)}; "
            f"install them with: apt-get install {' '.join(packages)}"
        )
    return fonts


def glyph_classes(fonts: Sequence[Font], cell: int) -> list[str]:
    """Characters every font covers, one per visually distinct glyph, in code point order.

    Two candidates are the same class (homoglyphs) when their renders (fixed size, centred, no
    jitter) differ by an RMS below `_DUPLICATE_RMS` in at least `_DUPLICATE_SHARE` of the
    families (one font each): the URW fonts, for one, draw Greek capitals unlike their Latin ones.
    Cached per (fonts, cell): the answer takes seconds and depends on nothing else.
    """
    return list(_glyph_classes(tuple(fonts), cell))


@functools.lru_cache(maxsize=4)
def _glyph_classes(fonts: tuple[Font, ...], cell: int) -> tuple[str, ...]:
    cover = set.intersection(*(_cmap(font.path) for font in fonts))
    candidates = [
        chr(code)
        for lo, hi in _BLOCKS
        for code in range(lo, hi + 1)
        if code in cover and unicodedata.category(chr(code))[0] in _KEPT_CATEGORIES
    ]
    references = list({font.family: font for font in reversed(fonts)}.values())
    renders = np.stack(
        [np.stack([_plain_render(char, font.path, cell) for font in references]) for char in candidates]
    )  # (C, F, cell, cell) in 0..1, ink = 1
    flat = renders.reshape(len(candidates), len(references), -1).transpose(1, 0, 2)  # (F, C, P)
    squared = (flat**2).sum(-1)
    rms = np.sqrt(np.maximum(squared[:, :, None] + squared[:, None, :] - 2 * flat @ flat.transpose(0, 2, 1), 0))
    same = (rms / cell < _DUPLICATE_RMS).mean(axis=0) >= _DUPLICATE_SHARE  # (C, C)
    kept: list[int] = []
    for i in range(len(candidates)):
        if not any(same[i, j] for j in kept) and renders[i].max() > 0:
            kept.append(i)
    return tuple(candidates[i] for i in kept)


def render(char: str, font: Font, cell: int, rng: np.random.Generator) -> Image.Image:
    """A grayscale `cell x cell` image of `char`, dark on light, with jittered size, offset and levels."""
    size = max(6, round(cell * rng.uniform(*_SIZE_RANGE)))
    dx, dy = rng.uniform(-_SHIFT, _SHIFT, size=2) * cell
    paper, ink = int(rng.integers(215, 256)), int(rng.integers(0, 50))
    image = Image.new("L", (cell, cell), paper)
    draw = ImageDraw.Draw(image)
    draw.text((cell / 2 + dx, cell / 2 + dy), char, fill=ink, font=_font(font.path, size), anchor="mm")
    return image


def make_dataset(
    out: Path,
    *,
    cell: int = 32,
    train_classes: int = 240,
    val_classes: int = 50,
    test_classes: int = 150,
    train_per_class: int = 12,
    queries_per_class: int = 2,
    gallery_per_class: int = 4,
    seed: int = 0,
    fonts: Sequence[Font] | None = None,
    query_family: str | None = None,
) -> dict[str, int]:
    """Write `out/images/<split>/*.png` and `out/dataset.csv`; returns the number of rows per split.

    `query_family` None: queries in serif families, gallery in the others; a family name: queries in
    that family, gallery in every other one.
    """
    try:
        fonts = list(fonts if fonts is not None else find_fonts())
    except MissingFonts as exc:
        raise SystemExit(f"error: {exc}") from None
    groups = {group: [f for f in fonts if f.group == group] for group in ("serif", "other")}
    if query_family is not None:
        installed = sorted({f.family for f in fonts})
        if query_family not in installed:
            raise SystemExit(f"error: --query-family {query_family!r} is not one of: {', '.join(installed)}")
        groups = {"serif": [f for f in fonts if f.family == query_family]}
        groups["other"] = [f for f in fonts if f.family != query_family]
    for group, members in groups.items():
        if len({f.family for f in members}) < (1 if query_family and group == "serif" else 2):
            raise SystemExit(f"error: fewer than two {group} font families installed; install the fonts-* packages")
    plan = cross_style_plan(
        fonts, groups["serif"], groups["other"], train_per_class, queries_per_class, gallery_per_class
    )
    splits = split_classes(glyph_classes(fonts, cell), seed, train_classes, val_classes, test_classes)
    return write_dataset(out, splits, seed, ord, plan, lambda char, font, rng: render(char, font, cell, rng))


_FONT_CACHE: dict[tuple[Path, int], ImageFont.FreeTypeFont] = {}


def _font(path: Path, size: int) -> ImageFont.FreeTypeFont:
    key = (path, size)
    if key not in _FONT_CACHE:
        _FONT_CACHE[key] = ImageFont.truetype(str(path), size)
    return _FONT_CACHE[key]


def _cmap(path: Path) -> set[int]:
    with TTFont(str(path), lazy=True) as font:
        return set(font.getBestCmap())


def _plain_render(char: str, path: Path, cell: int) -> np.ndarray:
    image = Image.new("L", (cell, cell), 255)
    ImageDraw.Draw(image).text((cell / 2, cell / 2), char, fill=0, font=_font(path, round(cell * 0.63)), anchor="mm")
    return 1 - np.asarray(image, dtype=np.float32) / 255


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_arguments(
        parser,
        size=32,
        classes=(240, 50, 150),
        train_per_class=12,
        gallery_per_class=4,
        styles="fonts",
        query_styles="serif",
    )
    parser.add_argument("--query-family", help="queries in this family, gallery in all others (default: serif/other)")
    args = parser.parse_args(argv)
    print_counts(args, make_dataset(args.out, **size_options(args), query_family=args.query_family))


if __name__ == "__main__":
    main()
