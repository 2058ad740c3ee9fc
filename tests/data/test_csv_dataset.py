"""The generic CSV format: parsing, class numbering, query/gallery flags, and the errors users meet."""

import csv

import numpy as np
import pytest
import torch

from retrieval.data import ImageDataset, read_csv_split, read_csv_splits
from retrieval.errors import UserError


def _rewrite(path, rows, fieldnames):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)


def _rows(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_splits_are_numbered_per_split_with_numeric_ids_in_numeric_order(csv_dataset):
    train = read_csv_split(csv_dataset, "train")
    test = read_csv_split(csv_dataset, "test")
    assert len(train.paths) == 16 and len(test.paths) == 12
    assert train.class_names == ["0", "2", "class1", "class3"]
    assert sorted(set(train.labels.tolist())) == [0, 1, 2, 3]
    assert test.class_names == ["100", "102", "class101"]
    assert all(path.is_file() for path in train.paths)
    assert train.query_mask is None and train.gallery_mask is None


def test_query_and_gallery_flags_are_read(csv_dataset):
    rows = _rows(csv_dataset)
    for i, row in enumerate(rows):
        row["is_query"] = "1" if i % 2 else "0"
        row["is_gallery"] = "0" if i % 2 else "1"
    _rewrite(csv_dataset, rows, ["path", "label", "split", "is_query", "is_gallery"])
    test = read_csv_split(csv_dataset, "test")
    test_rows = [r for r in rows if r["split"] == "test"]
    np.testing.assert_array_equal(test.query_mask, [r["is_query"] == "1" for r in test_rows])
    np.testing.assert_array_equal(test.gallery_mask, ~test.query_mask)


def test_missing_csv_names_the_file(tmp_path):
    with pytest.raises(UserError, match="dataset CSV not found: .*nope.csv"):
        read_csv_split(tmp_path / "nope.csv", "train")


def test_missing_column_is_named(csv_dataset):
    rows = [{"path": r["path"], "label": r["label"]} for r in _rows(csv_dataset)]
    _rewrite(csv_dataset, rows, ["path", "label"])
    with pytest.raises(UserError, match="lacks column\\(s\\) split"):
        read_csv_split(csv_dataset, "train")


def test_missing_image_is_named_with_the_count(csv_dataset):
    (csv_dataset.parent / "images" / "train_0_1.png").unlink()
    (csv_dataset.parent / "images" / "train_0_2.png").unlink()
    with pytest.raises(UserError, match="2 image\\(s\\) listed in .* do not exist, first: .*train_0_1.png"):
        read_csv_split(csv_dataset, "train")


def test_bad_split_value_names_the_line(csv_dataset):
    rows = _rows(csv_dataset)
    rows[3]["split"] = "valid"
    _rewrite(csv_dataset, rows, ["path", "label", "split"])
    with pytest.raises(UserError, match=r"dataset.csv:5: split must be train, val or test, got 'valid'"):
        read_csv_split(csv_dataset, "train")


def test_corrupt_image_raises_a_user_error_naming_it(csv_dataset):
    split = read_csv_split(csv_dataset, "train")
    split.paths[0].write_bytes(b"not a png")
    dataset = ImageDataset(split.paths, split.labels, transform=lambda image: torch.zeros(1))
    assert dataset[1][1] == int(split.labels[1])
    with pytest.raises(UserError, match="cannot read image .*train_0_0.png"):
        dataset[0]


def test_val_rows_form_their_own_split(csv_dataset):
    rows = _rows(csv_dataset)
    for row in rows:
        if row["label"] == "class3":
            row["split"] = "val"
    _rewrite(csv_dataset, rows, ["path", "label", "split"])
    splits = read_csv_splits(csv_dataset)
    assert sorted(splits) == ["test", "train", "val"]
    assert splits["val"].class_names == ["class3"] and len(splits["val"].paths) == 4
    assert "class3" not in splits["train"].class_names


@pytest.mark.parametrize("flag", ["is_query", "is_gallery"])
def test_only_one_query_gallery_column_is_an_error(csv_dataset, flag):
    rows = _rows(csv_dataset)
    for row in rows:
        row[flag] = "1"
    _rewrite(csv_dataset, rows, ["path", "label", "split", flag])
    with pytest.raises(UserError, match=f"has column {flag} but not is_"):
        read_csv_split(csv_dataset, "test")


@pytest.mark.parametrize(("flag", "value"), [("is_query", "maybe"), ("is_gallery", "2")])
def test_an_unknown_flag_value_names_the_file_line_and_value(csv_dataset, flag, value):
    rows = _rows(csv_dataset)
    for row in rows:
        row["is_query"], row["is_gallery"] = "1", "yes"
    rows[6][flag] = value
    _rewrite(csv_dataset, rows, ["path", "label", "split", "is_query", "is_gallery"])
    with pytest.raises(UserError, match=rf"dataset.csv:8: {flag} must be 0/1, true/false or yes/no, got '{value}'$"):
        read_csv_splits(csv_dataset)


def test_flag_values_are_read_case_insensitively_and_an_empty_cell_is_false(csv_dataset):
    rows = _rows(csv_dataset)
    spellings = ["1", "0", "TRUE", "False", "Yes", "no", ""]
    for i, row in enumerate(rows):
        row["is_query"], row["is_gallery"] = spellings[i % 7], spellings[(i + 1) % 7]
    _rewrite(csv_dataset, rows, ["path", "label", "split", "is_query", "is_gallery"])
    test = read_csv_split(csv_dataset, "test")
    test_rows = [row for row in rows if row["split"] == "test"]
    set_values = {"1", "true", "yes"}
    np.testing.assert_array_equal(test.query_mask, [row["is_query"].lower() in set_values for row in test_rows])
    np.testing.assert_array_equal(test.gallery_mask, [row["is_gallery"].lower() in set_values for row in test_rows])
