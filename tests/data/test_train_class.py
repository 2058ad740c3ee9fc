"""`EvalSplit.train_class`: each evaluation image's training class (its proxy), -1 when the class never trained."""

from __future__ import annotations

import csv

import numpy as np
from PIL import Image

from retrieval.config import load_config
from retrieval.data import build_data

_PREPROCESSING = {"mean": (0.5,) * 3, "std": (0.5,) * 3}


def test_csv_test_and_val_rows_map_to_training_classes_by_name(tmp_path):
    rows = []
    layout = {"train": ["b", "b", "10", "10", "2", "2"], "val": ["2", "b"], "test": ["10", "zz", "b", "2", "zz"]}
    for split, names in layout.items():
        for i, name in enumerate(names):
            path = f"{split}_{i}.png"
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(tmp_path / path)
            rows.append({"path": path, "label": name, "split": split})
    with (tmp_path / "data.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    config = load_config(None, ["data.name=csv", f"data.path={tmp_path / 'data.csv'}", "data.val_fraction=0"])
    data = build_data(config.data, _PREPROCESSING, config.augment)
    # training classes in sorted order: "2" -> 0, "10" -> 1, "b" -> 2; "zz" never trained
    names = {0: "2", 1: "10", 2: "b"}
    assert [names[c] for c in data.train_labels] == layout["train"]
    assert data.test.train_class.tolist() == [1, -1, 2, 0, -1]
    assert data.val.train_class.tolist() == [0, 2]


def test_digits_validation_by_image_is_closed_set_and_by_class_is_not():
    by_image = load_config(None, ["data.val_fraction=0.2"])
    data = build_data(by_image.data, _PREPROCESSING, by_image.augment)
    assert np.array_equal(data.test.train_class, data.test.labels) and np.array_equal(
        data.val.train_class, data.val.labels
    )
    by_class = load_config(None, ["data.val_fraction=0", "data.val_classes=3"])
    data = build_data(by_class.data, _PREPROCESSING, by_class.augment)
    assert (data.val.train_class == -1).all()  # held-out classes have no proxy
    trained = data.test.train_class >= 0
    assert trained.sum() > 0 and (~trained).sum() > 0
    assert len(np.unique(data.test.train_class[trained])) == data.num_classes == 7
