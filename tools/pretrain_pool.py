"""Write the unlabeled pretraining CSV of row (c) in docs/experiments/pretraining.md.

A catalogue is known before it is searched, and a user holds images of classes nobody labeled. So row (c)
pretrains on: the dataset's training images, its test gallery images (the catalogue), and every image of
`--extra` whose class is in no split of the dataset (the pool). `--extra` is the same maker run with more
training classes: the makers draw test and val classes first, so its extra classes are new ones, rendered
exactly as a training class would be. Labels are dropped; paths are written relative to the output's folder.

    python tools/make_glyph_dataset.py --out glyphs64x --train-classes 306 ...   # 22 classes more
    python tools/pretrain_pool.py --dataset glyphs64/dataset.csv --extra glyphs64x/dataset.csv --out pool.csv
    retrieval pretrain --csv pool.csv ...
"""

from __future__ import annotations

import argparse
import csv
import os
from collections.abc import Sequence
from pathlib import Path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def pool_paths(dataset: Path, extra: Path) -> dict[str, list[Path]]:
    """The images of each part of the pool: `train`, `gallery` (test rows searched) and `pool` (unseen classes)."""
    rows, extra_rows = _rows(dataset), _rows(extra)
    known = {row["label"] for row in rows}
    return {
        "train": [dataset.parent / row["path"] for row in rows if row["split"] == "train"],
        "gallery": [
            dataset.parent / row["path"]
            for row in rows
            if row["split"] == "test" and row.get("is_gallery", "1") in ("1", "true", "True")
        ],
        "pool": [extra.parent / row["path"] for row in extra_rows if row["label"] not in known],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="the labeled dataset's CSV")
    parser.add_argument("--extra", type=Path, required=True, help="a CSV with classes the dataset lacks")
    parser.add_argument("--out", type=Path, required=True, help="the pretraining CSV (a path column)")
    args = parser.parse_args(argv)
    parts = pool_paths(args.dataset, args.extra)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path"])
        for paths in parts.values():
            writer.writerows([os.path.relpath(path, args.out.parent)] for path in paths)
    print(", ".join(f"{part}: {len(paths)} images" for part, paths in parts.items()) + f"; wrote {args.out}")


if __name__ == "__main__":
    main()
