"""`retrieval index query`'s table shows the columns a query filtered on, or those `--columns` names."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.cli.main import main

NO_WORKERS = ["--num-workers", "0"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_checkpoint, csv_dataset_factory) -> tuple[Path, Path]:
    """(a query image, index dir) of the CSV dataset: columns id, path, label, split."""
    root = tmp_path_factory.mktemp("columns")
    csv_path = csv_dataset_factory(root / "data")
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(root / "ix")]
    assert main([*args, "--type", "flat", *NO_WORKERS]) == 0
    return csv_path.parent / "images" / "train_0_0.png", root / "ix"


def _table(capsys, indexed: tuple[Path, Path], *args: str) -> list[str]:
    image, index = indexed
    capsys.readouterr()
    assert main(["index", "query", "--index", str(index), "--image", str(image), "-k", "3", *NO_WORKERS, *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_table_shows_the_columns_the_filter_names(indexed, capsys) -> None:
    lines = _table(capsys, indexed, "--where", "split = 'test' and label != '100'")
    assert lines[1].split() == ["rank", "score", "id", "label", "path", "split"]  # label is shown already
    assert all(line.endswith("  test") for line in lines[2:5])
    assert _table(capsys, indexed)[1].split() == ["rank", "score", "id", "label", "path"]


def test_columns_names_them_and_an_unknown_one_is_one_line(indexed, capsys) -> None:
    lines = _table(capsys, indexed, "--columns", "split", "--where", "label = '0'")
    assert lines[1].split()[-1] == "split" and lines[2].endswith("  train")
    image, index = indexed
    assert main(["index", "query", "--index", str(index), "--image", str(image), "--columns", "colour"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --columns: colour not in the index's metadata; its columns: id, path, label, split"
    ]
