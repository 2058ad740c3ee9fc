"""Multi-label CSVs (labels joined by '|'): multi-hot loading, training with the asymmetric loss, evaluation.

`train` refusing a single-label setup on them, in one line, is tests/cli/test_train_cli.py's."""

import csv
import json

import numpy as np
import pytest
import torch
import yaml

from retrieval.data import ImageDataset, read_csv_splits
from tests.conftest import TINY_BACKBONE
from tests.train.training import train


def make_multi_label(csv_path):
    """Give every row a second label shared across classes: its class parity ("even"/"odd")."""
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        number = int(row["label"].removeprefix("class"))
        row["label"] = f"{row['label']}|{'odd' if number % 2 else 'even'}"
    # One test image of a class of its own: it has a relevant item only through its parity label.
    next(row for row in rows if row["split"] == "test" and row["label"].endswith("odd"))["label"] = "solo|odd"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def test_multi_label_rows_load_as_multi_hot(csv_dataset):
    rows = make_multi_label(csv_dataset)
    splits = read_csv_splits(csv_dataset)
    train = splits["train"]
    assert train.class_names == ["0", "2", "class1", "class3", "even", "odd"]
    assert train.labels.dtype == np.bool_ and train.labels.shape == (16, 6)
    train_rows = [row for row in rows if row["split"] == "train"]
    for row, hot in zip(train_rows, train.labels, strict=True):
        assert {train.class_names[i] for i in np.flatnonzero(hot)} == set(row["label"].split("|"))
    assert splits["test"].class_names == ["100", "102", "class101", "even", "odd", "solo"]
    _, label = ImageDataset(train.paths, train.labels, lambda image: torch.zeros(1))[0]
    assert label.dtype == torch.bool and label.tolist() == train.labels[0].tolist()


def multi_label_config(tmp_path, csv_path, loss):
    config = {
        "model": {"backbone": TINY_BACKBONE, "embedding_dim": 16, "pretrained": False},
        "data": {"name": "csv", "path": str(csv_path), "image_size": 16, "batch_size": 8, "num_workers": 0},
        "loss": {"name": loss},
        "train": {"epochs": 1, "freeze_backbone_epochs": 0, "freeze_bn": False, "device": "cpu", "threads": 1},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_multi_label_csv_trains_with_the_asymmetric_loss_and_evaluates(tmp_path, csv_dataset, capsys):
    make_multi_label(csv_dataset)
    run = tmp_path / "run"
    train(output_dir=run, config=multi_label_config(tmp_path, csv_dataset, "asymmetric_proxy"))
    result = json.loads((run / "result.json").read_text())
    test = result["test"]
    # Every test query shares its parity label with other test images, "solo" too: all 12 are scored.
    assert test["num_queries"] == 12 and test["num_queries_without_positive"] == 0
    assert 0.0 <= test["map@r"] <= 1.0 and 0.0 <= test["recall@1"] <= 1.0
