"""`retrieval embed` on the command line: the lines it prints, and its mistakes in one line with exit code 2.

What the file holds, for every source and format, is tested without the command line in
`tests/inference/test_embed_run.py`."""

from __future__ import annotations

import re

import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import read_embeddings
from tests.data.official_layouts import write_class_folders


def _embed(*args):
    return main(["embed", *map(str, args), "--num-workers", "0", "--device", "cpu"])


def test_unreadable_images_are_listed_and_left_out(tmp_path, tiny_checkpoint, capsys):
    files = write_class_folders(tmp_path / "images", ["a", "b"])
    files["b"][0].write_bytes(b"not an image")
    out = tmp_path / "embeddings.npy"
    assert _embed("--checkpoint", tiny_checkpoint, "--images", tmp_path / "images", "--out", out) == 0
    captured = capsys.readouterr()
    assert "skipped 1 unreadable image(s)" in captured.err and str(files["b"][0].resolve()) in captured.err
    assert str(files["b"][0].resolve()) not in read_embeddings(out)["ids"].tolist()
    assert "1 unreadable image(s) skipped" in captured.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "x.npz"], "give exactly one image source, got none"),
        (["--csv", "a.csv", "--set", "data.name=csv", "--out", "x.npz"], "got --csv and --set"),
        (["--images", "imgs", "--out", "x.csv"], "end the name with .npz, .npy, .parquet"),
        (["--set", "train.lr=1", "--out", "x.npz"], "embed --set takes data.\\* keys only"),
        (["--set", "data.name=cub200", "--out", "x.npz"], "data.root is not set"),
        (["--set", "data.name=folder", "--set", "data.root=nowhere", "--out", "x.npz"], "data.root nowhere is not a"),
        (["--csv", "missing.csv", "--out", "x.npz"], "CSV not found: missing.csv"),
        (["--images", "imgs", "--out", "x.npz", "--batch-size", "0"], "--batch-size must be >= 1"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(tmp_path, tiny_checkpoint, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert _embed("--checkpoint", tiny_checkpoint, *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert re.search(message, err[0]), err[0]
    assert not any(tmp_path.glob("x.*"))


def test_an_unknown_split_value_in_the_csv_is_one_line(tmp_path, tiny_checkpoint, csv_dataset_factory, capsys):
    """`embed` reads a CSV with the training reader: a split it does not know names the file and line."""
    csv_path = csv_dataset_factory(tmp_path / "data", train_classes=1, test_classes=1, per_class=2)
    lines = csv_path.read_text().splitlines()
    lines[3] = lines[3].replace(",test", ",testing")
    csv_path.write_text("\n".join(lines) + "\n")
    assert _embed("--checkpoint", tiny_checkpoint, "--csv", csv_path, "--out", tmp_path / "x.npz") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {csv_path}:4: split must be train, val or test, got 'testing'"]
    assert not (tmp_path / "x.npz").exists()


def test_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    (tmp_path / "a.png").write_bytes(b"listed, never read: the checkpoint is missing")
    assert _embed("--checkpoint", tmp_path / "none.pt", "--images", tmp_path, "--out", tmp_path / "x.npz") == 2
    assert "checkpoint not found" in capsys.readouterr().err
