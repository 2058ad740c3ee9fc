"""What the cross-style dev datasets share: unseen-class splits, the render loop and the CSV they write.

`tools/make_glyph_dataset.py` (characters in many fonts) and `tools/make_emoji_dataset.py` (emoji
in several vendors' artwork) both draw each class in several styles, split the classes into
train / val / test (val and test classes unseen in training), render queries in one style
against a gallery in the others, and write the generic dataset CSV
(`path,label,split,is_query,is_gallery`). Each image of a class draws from one random generator
seeded by (seed, the class's code point), so a dataset is the same on every machine.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
from PIL import Image
from tqdm import tqdm

from retrieval.runtime.files import atomic_write

__all__ = ["Plan", "pick", "split_classes", "write_dataset"]

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
