"""The test-split leak check of `retrieval evaluate`: identical files always, near-copies with --exclude-leaks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.config import DataConfig
from retrieval.data import EvalSplit
from retrieval.evaluate.leak_check import identical_test_rows, warning_line, without_rows
from tests.conftest import add_train_copy_as_test


def _leak_one_train_image(csv_dataset: Path) -> Path:
    """A byte copy of a train image listed as a test image of another class (so it cannot help its own queries)."""
    return add_train_copy_as_test(csv_dataset, "leaked.png", 101)


def test_identical_files_are_flagged_on_the_test_rows(csv_dataset):
    flagged = identical_test_rows(DataConfig(name="csv", path=str(_leak_one_train_image(csv_dataset))))
    assert flagged is not None and flagged.tolist() == [False] * 12 + [True]
    assert identical_test_rows(DataConfig(name="digits")) is None


def test_excluded_rows_are_neither_queries_nor_gallery():
    split = EvalSplit(dataset=None, labels=np.zeros(4), gallery_mask=np.array([True, True, False, True]))
    scored = without_rows(split, np.array([False, True, False, False]))
    assert scored.query_mask.tolist() == [True, False, True, True]
    assert scored.gallery_mask.tolist() == [True, False, False, True]


def test_the_warning_is_one_line_with_the_count_and_share():
    line = warning_line(np.array([True, False, False, False]), "identical files to", excluded=False)
    assert line.startswith("warning: 1 of 4 test images (25.00%) are identical files to train/val images; ")
    assert "\n" not in line and "--exclude-leaks" in line


@pytest.mark.slow
def test_evaluate_warns_about_a_copied_file_and_scores_without_it_when_asked(
    csv_dataset, tiny_checkpoint, tmp_path, capsys
):
    dataset = _leak_one_train_image(csv_dataset)
    base = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--set", f"data.path={dataset}"]
    base += ["--set", "data.num_workers=0", "--set", "data.val_fraction=0"]
    assert main([*base, "--json", str(tmp_path / "all.json")]) == 0
    warned = capsys.readouterr()
    assert warned.err.count("warning: 1 of 13 test images (7.69%) are identical files to train/val images") == 1
    assert main([*base, "--exclude-leaks", "--json", str(tmp_path / "clean.json")]) == 0
    excluded = capsys.readouterr()
    assert "are near-copies (cosine >= 0.95) of train/val images; the metrics below leave them out" in excluded.err
    assert json.loads((tmp_path / "clean.json").read_text())["leaks"]["excluded"] is True
    assert main([*base, "--leak-threshold", "0.9"]) == 2
    assert "add --exclude-leaks" in capsys.readouterr().err
