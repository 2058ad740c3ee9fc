"""`retrieval.data.splits`: a dataset's files read one way before PyTorch loads (`train`'s check) and by training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from retrieval.config import DataConfig, load_config
from retrieval.data import build_data
from retrieval.data.splits import check_training_files, training_splits
from retrieval.errors import UserError


def _build(data: DataConfig) -> None:
    config = load_config(None, ["data.name=csv", "data.path=unused.csv"])  # its augment section
    build_data(data, {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}, config.augment)


def test_a_dataset_without_test_rows_is_refused_alike_before_and_while_training(csv_dataset: Path):
    train_only = csv_dataset.with_name("train_only.csv")
    lines = csv_dataset.read_text().splitlines()
    train_only.write_text("\n".join(line for line in lines if not line.endswith(",test")) + "\n")
    data = DataConfig(name="csv", path=str(train_only))
    message = f"{train_only} has no rows with split=test; every dataset needs train and test rows"
    with pytest.raises(UserError) as early:
        check_training_files(data)
    with pytest.raises(UserError) as built:
        _build(data)
    assert str(early.value) == str(built.value) == message


def test_a_folder_dataset_whose_test_images_are_all_excluded_names_its_root(tmp_path: Path):
    """The message named `data.path`, which a folder dataset leaves unset: "None has no rows with split=test"."""
    root = tmp_path / "classes"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(root / name / "0.png")
    exclude = tmp_path / "flagged.csv"
    exclude.write_text(f"path\n{root / 'b' / '0.png'}\n")  # class b is the test half
    data = DataConfig(name="folder", root=str(root), exclude=str(exclude))
    with pytest.raises(UserError, match=f"^{root} has no rows with split=test;"):
        training_splits(data)


def test_the_digits_have_no_files_to_check():
    check_training_files(DataConfig(name="digits"))
