"""`retrieval index query --where`: an expression or a JSON file, and one-line errors before any embedding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval.cli.main import main

NO_WORKERS = ["--num-workers", "0"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, tiny_checkpoint, csv_dataset_factory) -> tuple[Path, Path]:
    """(csv, index dir) of a 28-image CSV dataset, half train and half test."""
    root = tmp_path_factory.mktemp("where")
    csv_path = csv_dataset_factory(root / "data")
    index = root / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(index)]
    assert main([*args, "--type", "flat", *NO_WORKERS]) == 0
    return csv_path, index


def _query(capsys, index: Path, image: Path, *args: str) -> list[dict]:
    capsys.readouterr()
    command = ["index", "query", "--index", str(index), "--image", str(image), "--json", "-k", "28", *NO_WORKERS]
    assert main([*command, *args]) == 0
    (answer,) = json.loads(capsys.readouterr().out)
    return answer["results"]


def test_where_keeps_only_passing_items_in_score_order(indexed, capsys, tmp_path) -> None:
    csv_path, index = indexed
    image = csv_path.parent / "images" / "train_0_0.png"
    everything = _query(capsys, index, image)
    passing = _query(capsys, index, image, "--where", "split = 'test' and label in ('class101', '100')")
    expected = [r["id"] for r in everything if r["split"] == "test" and r["label"] in ("class101", "100")]
    assert [r["id"] for r in passing] == expected and len(expected) == 8
    assert [r["rank"] for r in passing] == list(range(1, 9))

    where_file = tmp_path / "where.json"
    where_file.write_text(json.dumps({"split": "test", "label": {"in": ["class101", "100"]}}))
    assert _query(capsys, index, image, "--where", str(where_file)) == passing


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("colour = 'red'", "error: filter column 'colour' is not in the metadata; columns: id, path, label, split"),
        ("split = test", "error: bad filter expression at character 9: expected a value"),
        ("missing.json", "error: cannot read filter file missing.json"),
    ],
)
def test_a_bad_where_is_one_line_before_embedding(where, message, indexed, capsys, monkeypatch) -> None:
    csv_path, index = indexed
    monkeypatch.setattr("retrieval.cli.index.encoder_for_index", lambda *args, **kwargs: pytest.fail("embedded"))
    image = csv_path.parent / "images" / "train_0_0.png"
    assert main(["index", "query", "--index", str(index), "--image", str(image), "--where", where]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
