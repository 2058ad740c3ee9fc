"""`data.exclude`: the images an exclusion CSV lists leave every split; a `keep` column spares its keep=1 rows."""

from __future__ import annotations

import csv

import pytest

from retrieval.config import DataConfig
from retrieval.data import read_splits
from retrieval.data.exclusion import excluded_paths
from retrieval.errors import UserError


def test_excluded_rows_leave_the_splits_and_an_emptied_class_disappears(csv_dataset):
    images = csv_dataset.parent / "images"
    gone = [images / f"train_0_{i}.png" for i in range(4)] + [images / "test_100_0.png"]
    exclude = csv_dataset.parent / "flagged.csv"
    exclude.write_text("rank,path\n" + "".join(f"{n},{path}\n" for n, path in enumerate(gone)))
    before = read_splits(DataConfig(name="csv", path=str(csv_dataset)))
    after = read_splits(DataConfig(name="csv", path=str(csv_dataset), exclude=str(exclude)))
    assert len(after["train"].paths) == len(before["train"].paths) - 4
    assert len(after["test"].paths) == len(before["test"].paths) - 1
    assert "0" not in after["train"].class_names and len(after["train"].class_names) == 3
    assert sorted(set(after["train"].labels.tolist())) == [0, 1, 2]  # renumbered
    assert not set(gone) & {path.resolve() for split in after.values() for path in split.paths}


def test_a_keep_column_excludes_only_keep_0_rows_with_paths_relative_to_the_csv(tmp_path):
    exclude = tmp_path / "near_duplicates.csv"
    exclude.write_text("group,keep,path\n0,1,a.png\n0,0,b.png\n1,1,c.png\n1,0,sub/d.png\n")
    assert excluded_paths(exclude) == {(tmp_path / "b.png").resolve(), (tmp_path / "sub/d.png").resolve()}
    exclude.write_text("group,keep,path\n0,maybe,a.png\n")
    with pytest.raises(UserError, match=r"near_duplicates.csv:2: keep must be 0 or 1"):
        excluded_paths(exclude)


def test_exclude_on_a_dataset_without_files_is_refused():
    from retrieval.config import load_config
    from retrieval.data import build_data

    config = load_config(None, ["data.exclude=x.csv"])  # the digits demo
    with pytest.raises(UserError, match="data.exclude lists image files"):
        build_data(config.data, {"mean": (0.5,), "std": (0.5,)}, config.augment, 1)


def test_a_path_ending_in_whitespace_is_excluded_as_it_is_named(tmp_path):
    """Found by the audit's names property: the reader stripped every cell, so an audit CSV naming `train/\\n` (a
    legal file name) excluded the folder `train`, and `a.png\\xa0` the file `a.png`, without a word."""
    exclude = tmp_path / "flagged.csv"
    names = ["a.png\u00a0", "b.png ", "c\n", "d\r"]
    with exclude.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\r\n").writerows([["path"], *([str(tmp_path / name)] for name in names)])
    assert excluded_paths(exclude) == {tmp_path / name for name in names}
