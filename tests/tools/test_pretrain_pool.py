"""tools/pretrain_pool.py: training images, the test gallery and the extra classes, nothing else, no labels."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.tools.tool_modules import load_tool

pool = load_tool("pretrain_pool")


def _write(path: Path, rows: list[tuple[str, str, str, str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "split", "is_query", "is_gallery"])
        writer.writerows(rows)


def test_the_pool_holds_train_the_test_gallery_and_only_the_new_classes(tmp_path: Path) -> None:
    dataset = tmp_path / "small" / "dataset.csv"
    _write(dataset, [
        ("images/a0.png", "A", "train", "0", "0"), ("images/v0.png", "V", "val", "1", "0"),
        ("images/v1.png", "V", "val", "0", "1"), ("images/t0.png", "T", "test", "1", "0"),
        ("images/t1.png", "T", "test", "0", "1"),
    ])  # fmt: skip
    extra = tmp_path / "big" / "dataset.csv"
    _write(extra, [
        ("images/a0.png", "A", "train", "0", "0"), ("images/b0.png", "B", "train", "0", "0"),
        ("images/b1.png", "B", "train", "0", "0"), ("images/t0.png", "T", "test", "1", "0"),
    ])  # fmt: skip
    out = tmp_path / "out" / "pool.csv"
    pool.main(["--dataset", str(dataset), "--extra", str(extra), "--out", str(out)])
    with out.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["path"]
    written = [str((out.parent / row[0]).resolve().relative_to(tmp_path)) for row in rows[1:]]
    assert written == ["small/images/a0.png", "small/images/t1.png", "big/images/b0.png", "big/images/b1.png"]
