"""What the cross-style dev datasets share: unseen-class splits, the render loop and the CSV they write.

`tools/make_glyph_dataset.py` (characters in many fonts) and `tools/make_emoji_dataset.py` (emoji
in several vendors' artwork) both draw each class in several styles, split the classes into
train / val / test (val and test classes unseen in training), render queries in one style
against a gallery in the others, and write the generic dataset CSV
(`path,label,split,is_query,is_gallery`). Each image of a class draws from one random generator
seeded by (seed, the class's code point), so a dataset is the same on every machine.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image
from tqdm import tqdm

from retrieval.runtime.files import atomic_write

__all__ = [
    "Plan",
    "add_size_arguments",
    "cross_style_plan",
    "pick",
    "print_counts",
    "size_options",
    "split_classes",
    "write_dataset",
]

Item = TypeVar("Item")
Member = TypeVar("Member")
# The images of one class in one split: (style, is_query, is_gallery) for each, drawn with the class's generator.
Plan = list[tuple[Item, int, int]]


def split_classes(classes: Sequence[Member], seed: int, train: int, val: int, test: int) -> dict[str, list[Member]]:
    """Disjoint test, val and train classes drawn at random (test first, so it does not move when train grows)."""
    wanted = train + val + test
    if wanted > len(classes):
        raise SystemExit(f"error: {wanted} classes asked for, the styles share only {len(classes)}; ask for fewer")
    order = np.random.default_rng(seed).permutation(len(classes))
    return {
        "test": [classes[i] for i in order[:test]],
        "val": [classes[i] for i in order[test : test + val]],
        "train": [classes[i] for i in order[test + val : wanted]],
    }


def pick(rng: np.random.Generator, items: Sequence[Item], n: int) -> list[Item]:
    """`n` items drawn without replacement (cycling through all of them again when n > len(items))."""
    chosen: list[Item] = []
    while len(chosen) < n:
        chosen.extend(items[i] for i in rng.permutation(len(items))[: n - len(chosen)])
    return chosen


def cross_style_plan(
    styles: Sequence[Item],
    queries: Sequence[Item],
    gallery: Sequence[Item],
    train_per_class: int,
    queries_per_class: int,
    gallery_per_class: int,
) -> Callable[[str, np.random.Generator], Plan]:
    """The images of a class in a split: training ones in any of `styles`; val/test queries in `queries`, gallery
    in `gallery` (a query never meets its own style)."""

    def plan(split: str, rng: np.random.Generator) -> Plan:
        if split == "train":
            return [(style, 0, 0) for style in pick(rng, styles, train_per_class)]
        return [(style, 1, 0) for style in pick(rng, queries, queries_per_class)] + [
            (style, 0, 1) for style in pick(rng, gallery, gallery_per_class)
        ]

    return plan


def add_size_arguments(
    parser: argparse.ArgumentParser,
    *,
    size: int,
    classes: tuple[int, int, int],
    train_per_class: int,
    gallery_per_class: int,
    styles: str,
    query_styles: str,
) -> None:
    """The options both makers take: `--out`, image side, classes per split, images per class, seed.

    `classes` are the default train, val and test class counts; `styles` and `query_styles` name what the
    images are drawn in, for the help.
    """
    train, val, test = classes
    parser.add_argument("--out", type=Path, required=True, help="output folder (dataset.csv + images/)")
    parser.add_argument("--size", type=int, default=size, help="image side in pixels")
    parser.add_argument("--train-classes", type=int, default=train)
    parser.add_argument("--val-classes", type=int, default=val, help="held-out train-side classes for selection")
    parser.add_argument("--test-classes", type=int, default=test)
    parser.add_argument(
        "--train-per-class", type=int, default=train_per_class, help=f"training images per class (all {styles})"
    )
    parser.add_argument("--queries-per-class", type=int, default=2, help=f"val/test queries per class ({query_styles})")
    parser.add_argument(
        "--gallery-per-class", type=int, default=gallery_per_class, help="val/test gallery images per class (others)"
    )
    parser.add_argument("--seed", type=int, default=0)


def size_options(args: argparse.Namespace) -> dict[str, Any]:
    """`make_dataset`'s keyword arguments from the options of `add_size_arguments`."""
    names = (
        "train_classes",
        "val_classes",
        "test_classes",
        "train_per_class",
        "queries_per_class",
        "gallery_per_class",
    )
    return {"cell": args.size, "seed": args.seed, **{name: getattr(args, name) for name in names}}


def print_counts(args: argparse.Namespace, counts: dict[str, int]) -> None:
    """What a maker wrote: classes and images per split, and the CSV's path."""
    classes = {"train": args.train_classes, "val": args.val_classes, "test": args.test_classes}
    for split, n in counts.items():
        print(f"{split}: {classes[split]} classes, {n} images")
    print(f"wrote {args.out / 'dataset.csv'}")


def write_dataset(
    out: Path,
    splits: dict[str, list[Member]],
    seed: int,
    code: Callable[[Member], int],
    plan: Callable[[str, np.random.Generator], Plan],
    draw: Callable[[Member, Item, np.random.Generator], Image.Image],
    suffix: Callable[[Item], str] = lambda item: "",
) -> dict[str, int]:
    """Render every class's planned images to `out/images/<split>/u<code>_<n><suffix>.png`, write `out/dataset.csv`.

    Returns the number of rows per split.
    """
    rows = []
    for split, members in splits.items():
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        for member in tqdm(members, desc=f"rendering {split}", unit="class", file=sys.stderr):
            rng = np.random.default_rng([seed, code(member)])
            for n, (item, is_query, is_gallery) in enumerate(plan(split, rng)):
                name = f"images/{split}/u{code(member):04x}_{n:02d}{suffix(item)}.png"
                draw(member, item, rng).save(out / name)
                rows.append((name, f"U+{code(member):04X}", split, is_query, is_gallery))
    with atomic_write(out / "dataset.csv") as temporary, temporary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "split", "is_query", "is_gallery"])
        writer.writerows(rows)
    return {split: sum(row[2] == split for row in rows) for split in splits}
