"""`retrieval data longtail`: the exponential profile, untouched val/test rows, determinism, refusals.

What the command prints, and its one-line refusal, are tests/cli/test_data_cli.py's."""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

import pytest

from retrieval.data.longtail import longtail_counts, make_longtail_csv
from retrieval.errors import UserError


def write_balanced_csv(path: Path, classes: int = 10, per_class: int = 60) -> Path:
    """A CSV of `classes` training classes x `per_class` rows, plus val and test rows (no images needed)."""
    rows = [
        {"path": f"img/{c}_{i}.png", "label": f"k{c}", "split": "train"}
        for c in range(classes)
        for i in range(per_class)
    ]
    rows += [{"path": f"img/v{i}.png", "label": f"v{i % 3}", "split": "val"} for i in range(9)]
    rows += [{"path": f"img/t{i}.png", "label": str(i % 4), "split": "test"} for i in range(12)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_counts_follow_the_exponential_profile() -> None:
    counts = longtail_counts(10, 60, 20.0)
    expected = [math.floor(60 * 20.0 ** (-c / 9) + 1e-9) for c in range(10)]
    assert counts.tolist() == expected and counts[0] == 60 and counts[-1] == 3
    assert longtail_counts(1, 5, 100.0).tolist() == [5]


def test_csv_training_classes_follow_the_profile_and_other_rows_stay(tmp_path: Path) -> None:
    source = write_balanced_csv(tmp_path / "data" / "dataset.csv")
    out = tmp_path / "data" / "lt.csv"
    summary = make_longtail_csv(source, out, 20.0, seed=3)
    rows, original = read_rows(out), read_rows(source)
    sizes = sorted(Counter(r["label"] for r in rows if r["split"] == "train").values(), reverse=True)
    assert sizes == longtail_counts(10, 60, 20.0).tolist()
    assert [r for r in rows if r["split"] != "train"] == [r for r in original if r["split"] != "train"]
    assert all(r in original for r in rows)  # a subset of the rows, in their original order
    assert [original.index(r) for r in rows] == sorted(original.index(r) for r in rows)
    assert (summary.head, summary.tail, summary.train_after) == (60, 3, sum(sizes))


def test_deterministic_given_the_seed(tmp_path: Path) -> None:
    source = write_balanced_csv(tmp_path / "dataset.csv")
    a, b, c = (tmp_path / name for name in ("a.csv", "b.csv", "c.csv"))
    make_longtail_csv(source, a, 10.0, seed=1)
    make_longtail_csv(source, b, 10.0, seed=1)
    make_longtail_csv(source, c, 10.0, seed=2)
    assert a.read_text() == b.read_text() != c.read_text()


def test_paths_are_rewritten_for_another_folder(tmp_path: Path) -> None:
    source = write_balanced_csv(tmp_path / "data" / "dataset.csv", classes=2, per_class=3)
    out = tmp_path / "elsewhere" / "lt.csv"
    out.parent.mkdir()
    make_longtail_csv(source, out, 1.0)
    resolved = {(out.parent / r["path"]).resolve() for r in read_rows(out)}
    assert resolved == {(source.parent / r["path"]).resolve() for r in read_rows(source)}


def test_smaller_classes_than_the_profile_keep_all_their_images(tmp_path: Path) -> None:
    source = write_balanced_csv(tmp_path / "dataset.csv", classes=3, per_class=10)
    rows = [r for r in read_rows(source) if not (r["label"] == "k2" and r["path"] >= "img/2_4")]  # k2 keeps 4
    with source.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    summary = make_longtail_csv(source, tmp_path / "lt.csv", 2.0)  # profile 10, 7, 5: k2 is ranked last with 4
    sizes = Counter(r["label"] for r in read_rows(tmp_path / "lt.csv") if r["split"] == "train")
    assert sorted(sizes.values()) == [4, 7, 10] and summary.capped == 1


@pytest.mark.parametrize(
    ("ratio", "match"), [(0.5, "ratio >= 1"), (float("nan"), "ratio >= 1"), (61.0, "0 images.*--imbalance 60")]
)
def test_bad_ratios_are_refused(tmp_path: Path, ratio: float, match: str) -> None:
    source = write_balanced_csv(tmp_path / "dataset.csv")
    with pytest.raises(UserError, match=match):
        make_longtail_csv(source, tmp_path / "lt.csv", ratio)
    assert not (tmp_path / "lt.csv").exists()


def test_a_latin1_or_bom_csv_reads_like_every_other_command(tmp_path: Path) -> None:
    """The long-tail tool reads CSVs with the shared strict reader: a BOM is fine, Latin-1 is one line."""
    rows = "path,label,split\n" + "".join(f"img/{i}.png,{i % 2},train\n" for i in range(8)) + "img/t.png,0,test\n"
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + rows.encode())
    make_longtail_csv(bom, tmp_path / "out.csv", 2.0, seed=0)
    assert (tmp_path / "out.csv").read_text().startswith("path,label,split")
    latin = tmp_path / "latin.csv"
    latin.write_bytes((rows + "img/caf\xe9.png,1,train\n").encode("latin-1"))
    with pytest.raises(UserError, match=r"latin\.csv:\d+: not UTF-8 text"):
        make_longtail_csv(latin, tmp_path / "out2.csv", 2.0, seed=0)
