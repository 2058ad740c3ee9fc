"""tools/digits_pixel_baseline.py --csv: raw pixels scored on a CSV split with its query/gallery flags."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PIL import Image

from retrieval.evaluate.uncertainty import load_query_values
from tests.tools.tool_modules import load_tool

pixels = load_tool("digits_pixel_baseline")

RED, BLUE = (220, 30, 30), (30, 30, 220)


def _write(root: Path, rows: list[tuple[str, tuple[int, int, int], str, str, int, int]]) -> Path:
    with (root / "dataset.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "split", "is_query", "is_gallery"])
        for name, colour, label, split, is_query, is_gallery in rows:
            Image.new("RGB", (20, 12), colour).save(root / name)
            writer.writerow([name, label, split, is_query, is_gallery])
    return root / "dataset.csv"


def test_a_csv_split_is_searched_query_against_gallery(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A red query of class b finds only the red gallery image of class a: the other red query is not in the gallery."""
    path = _write(
        tmp_path,
        [
            ("t.png", BLUE, "c", "train", 0, 0),
            ("qa.png", RED, "a", "val", 1, 0),
            ("qb.png", BLUE, "b", "val", 1, 0),
            ("qb2.png", RED, "b", "val", 1, 0),
            ("ga.png", RED, "a", "val", 0, 1),
            ("gb.png", BLUE, "b", "val", 0, 1),
        ],
    )
    pixels.main(["--csv", str(path), "--split", "val", "--size", "8", "--per-query", str(tmp_path / "q.npz")])
    out = capsys.readouterr().out
    assert "val split (5 images, RGB 8 px)" in out
    assert "Recall@1: 0.6667" in out
    assert "95% CI (class bootstrap, 1000 resamples of 2 classes): Recall@1 0.6667" in out
    saved = load_query_values(tmp_path / "q.npz")  # the queries' rows in the split, as `retrieval compare` pairs them
    assert saved.rows.tolist() == [0, 1, 2]
    assert saved.values["recall@1"].tolist() == [1.0, 1.0, 0.0]


def test_gray_reads_the_images_as_l(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--gray` scores the images read as grayscale (L)."""
    path = _write(
        tmp_path,
        [
            ("t.png", BLUE, "c", "train", 0, 0),
            ("qa.png", RED, "a", "test", 1, 0),
            ("ga.png", RED, "a", "test", 0, 1),
            ("gb.png", BLUE, "b", "test", 0, 1),
        ],
    )
    pixels.main(["--csv", str(path), "--size", "8", "--gray"])
    assert "test split (3 images, L 8 px)" in capsys.readouterr().out
