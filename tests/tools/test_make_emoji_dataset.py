"""tools/make_emoji_dataset.py: valid CSV, zero-shot splits, one query style, deterministic, coloured images.

The protocol tests draw from small fake styles (no package needed); the pinned Debian artwork is
checked where it is installed (`apt-get install` the tool's `ARTWORK_PACKAGES`; CI does not).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from tests.tools.tool_modules import load_tool

emoji = load_tool("make_emoji_dataset")
try:
    REAL_STYLES = emoji.find_styles()
    MISSING = ""
except emoji.MissingArtwork as exc:
    REAL_STYLES, MISSING = [], str(exc)
needs_artwork = pytest.mark.skipif(bool(MISSING), reason=MISSING)

TINY = {"train_classes": 4, "val_classes": 2, "test_classes": 3, "train_per_class": 5}
TINY |= {"queries_per_class": 2, "gallery_per_class": 4}


@dataclass(frozen=True)
class FakeStyle:
    """A style that draws each code point as a polygon of its own: `shape` sets how, `monochrome` black ink."""

    name: str
    shape: int
    monochrome: bool = False
    codes: tuple[int, ...] = tuple(range(0x1F600, 0x1F60C))

    def cover(self) -> frozenset[int]:
        return frozenset(self.codes)

    def draw(self, code: int) -> Image.Image:
        rng = np.random.default_rng([code, self.shape])
        points = [tuple(float(v) for v in rng.uniform(0, 40, size=2)) for _ in range(3 + self.shape)]
        colour = (0, 0, 0, 255) if self.monochrome else (*(int(v) for v in rng.integers(0, 256, size=3)), 255)
        image = Image.new("RGBA", (48, 40), (0, 0, 0, 0))
        ImageDraw.Draw(image).polygon(points, fill=colour)
        return image


FAKES = [FakeStyle("flat", 0), FakeStyle("glossy", 1), FakeStyle("outline", 2, monochrome=True), FakeStyle("q", 3)]


def _make(root: Path, seed: int = 0, query_style: str = "q") -> list[dict[str, str]]:
    emoji.make_dataset(root, cell=32, seed=seed, styles=FAKES, query_style=query_style, **TINY)
    with (root / "dataset.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _style(row: dict[str, str]) -> str:
    return Path(row["path"]).stem.rsplit("_", 1)[1]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, str]]]:
    root = tmp_path_factory.mktemp("emoji")
    return root, _make(root)


def test_zero_shot_splits_and_the_one_style_query_protocol(dataset: tuple[Path, list[dict[str, str]]]) -> None:
    root, rows = dataset
    assert list(rows[0]) == ["path", "label", "split", "is_query", "is_gallery"]
    labels = {split: {r["label"] for r in rows if r["split"] == split} for split in ("train", "val", "test")}
    assert {split: len(names) for split, names in labels.items()} == {"train": 4, "val": 2, "test": 3}
    assert not (labels["train"] & labels["val"]) and not (labels["train"] & labels["test"])
    assert not (labels["val"] & labels["test"])
    for row in rows:
        assert (root / row["path"]).is_file()
        flags = (row["is_query"], row["is_gallery"])
        if row["split"] == "train":
            assert flags == ("0", "0")
        else:
            assert flags in {("1", "0"), ("0", "1")}  # a query is never its own gallery image
    for split in ("val", "test"):
        for label in labels[split]:
            members = [r for r in rows if r["label"] == label]
            queries = [r for r in members if r["is_query"] == "1"]
            gallery = [r for r in members if r["is_gallery"] == "1"]
            assert len(queries) == 2 and len(gallery) == 4  # so every query has a same-class gallery item
            assert {_style(r) for r in queries} == {"q"}
            assert "q" not in {_style(r) for r in gallery} and len({_style(r) for r in gallery}) == 3
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 4 * 5
    for label in labels["train"]:
        assert {_style(r) for r in train if r["label"] == label} == {f.name for f in FAKES}  # 5 images cycle all 4


def test_deterministic_for_a_seed(tmp_path: Path, dataset: tuple[Path, list[dict[str, str]]]) -> None:
    root, rows = dataset
    again = _make(tmp_path / "again")
    assert again == rows
    for row in rows:
        assert (root / row["path"]).read_bytes() == (tmp_path / "again" / row["path"]).read_bytes()
    other = _make(tmp_path / "other", seed=1)
    assert [r["label"] for r in other] != [r["label"] for r in rows]


def test_images_are_rgb_artwork_on_a_coloured_background(dataset: tuple[Path, list[dict[str, str]]]) -> None:
    root, rows = dataset
    backgrounds, outline_inks = set(), set()
    for row in rows:
        with Image.open(root / row["path"]) as image:
            assert image.mode == "RGB" and image.size == (32, 32)
            pixels = np.asarray(image, dtype=np.int32)
        background = tuple(pixels[0, 0])
        assert min(background) >= emoji._BACKGROUND_LOW, row["path"]  # a light background
        backgrounds.add(background)
        ink = np.abs(pixels - pixels[0, 0]).sum(-1) > 60
        assert ink.sum() >= 3, f"{row['path']} has no artwork"
        if _style(row) == "outline":
            darkest = pixels[ink][pixels[ink].sum(axis=1).argmin()]  # inside the shape, not an anti-aliased edge
            assert darkest.max() <= emoji._INK_HIGH + 1, row["path"]  # inked in a colour, never lighter
            outline_inks.add(tuple(np.median(pixels[ink], axis=0)))
    assert len(backgrounds) > len(rows) // 2  # the background colour is drawn per image
    assert len(outline_inks) > 3  # a monochrome style is inked in a different colour each time


def test_an_unknown_query_style_or_too_many_classes_stop_the_tool(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--query-style 'apple' is not one of: flat, glossy, outline, q"):
        _make(tmp_path, query_style="apple")
    with pytest.raises(SystemExit, match="20 classes asked for, the styles share only 12"):
        emoji.make_dataset(tmp_path, styles=FAKES, query_style="q", train_classes=15, val_classes=2, test_classes=3)


def _fake_artwork(root: Path, skip: str = "") -> None:
    """The pinned files under `root`, as placeholders (find_styles only lists and maps them)."""
    for name, (_, path, _) in emoji.STYLES.items():
        if name == skip:
            continue
        target = root / path
        if target.suffix == ".ttf":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        else:
            target.mkdir(parents=True, exist_ok=True)
    png = root / emoji.STYLES["emojione"][1]
    for stem in ("1F600", "1F601", "0023-20E3"):
        (png / f"{stem}.png").touch()
    named = root / emoji.STYLES["emojify"][1]
    for stem in ("grinning", "smile", "laughing", "satisfied", "hash", "octocat"):
        (named / f"{stem}.png").touch()
    index = {
        "grinning": {"unicode": "1f600", "shortname": ":grinning:", "aliases": [":smile:"]},
        "smile": {"unicode": "1f604", "shortname": ":smile:", "aliases": []},  # a key wins over another's alias
        "laughing": {"unicode": "1f606", "shortname": ":laughing:", "aliases": [":satisfied:"]},
        "hash": {"unicode": "0023-20e3", "shortname": ":hash:", "aliases": []},  # sequences are left out
    }
    if skip != "emojify":
        (root / emoji._SHORT_NAMES).parent.mkdir(parents=True, exist_ok=True)
        (root / emoji._SHORT_NAMES).write_text(json.dumps(index))


def test_a_missing_pinned_style_names_the_package_to_install(tmp_path: Path) -> None:
    _fake_artwork(tmp_path, skip="symbola")
    with pytest.raises(emoji.MissingArtwork, match=r"symbola; install it with: apt-get install fonts-symbola$"):
        emoji.find_styles(tmp_path)


def test_emojify_short_names_map_to_single_code_points(tmp_path: Path) -> None:
    _fake_artwork(tmp_path)
    styles = {style.name: style for style in emoji.find_styles(tmp_path)}
    assert list(styles) == ["noto", "emojione", "emojify", "symbola"]
    assert styles["emojione"].cover() == {0x1F600, 0x1F601}
    files = {code: path.stem for code, path in styles["emojify"].files}
    # laughing.png (sorted before satisfied.png) draws U+1F606; the unknown octocat and the keycap are left out.
    assert files == {0x1F600: "grinning", 0x1F604: "smile", 0x1F606: "laughing"}
    assert styles["symbola"].monochrome and not styles["noto"].monochrome


@needs_artwork
def test_the_pinned_artwork_shares_several_hundred_emoji_and_draws_each() -> None:
    codes = emoji.emoji_classes(REAL_STYLES)
    assert len(codes) >= 700
    assert {0x1F600, 0x1F436, 0x2764} <= set(codes)
    rng = np.random.default_rng(0)
    for style in REAL_STYLES:
        for code in (0x1F600, int(codes[len(codes) // 2])):
            pixels = np.asarray(emoji.render(style, code, 64, rng), dtype=np.int32)
            ink = np.abs(pixels - pixels[0, 0]).sum(-1) > 60
            assert 200 < ink.sum() < 64 * 64 * 0.9, (style.name, hex(code))
            colourful = (pixels[ink].max(axis=1) - pixels[ink].min(axis=1)).mean()
            assert colourful > 20 or style.monochrome, (style.name, hex(code))
