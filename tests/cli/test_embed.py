"""`retrieval embed`: the file holds what the encoder gives for the same images, in every format."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import read_embeddings
from retrieval.inference.image_encoder import ImageEncoder
from tests.data.official_layouts import write_class_folders, write_inshop

SUFFIXES = (".npz", ".npy", ".parquet")


@pytest.fixture(scope="module")
def encoder(tiny_checkpoint):
    return ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")


def _embed(*args):
    return main(["embed", *map(str, args), "--num-workers", "0", "--device", "cpu"])


def _reference(encoder, paths):
    embedded = encoder.embed_files(paths, batch_size=5, progress=False)  # another batch size than the command's
    assert not embedded.failures
    return embedded.embeddings


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_csv_round_trip_matches_the_encoder(tmp_path, tiny_checkpoint, csv_dataset_factory, encoder, suffix):
    csv_dataset = csv_dataset_factory(tmp_path / "data", train_classes=2, test_classes=2, per_class=2)
    out = tmp_path / f"out/embeddings{suffix}"
    assert _embed("--checkpoint", tiny_checkpoint, "--csv", csv_dataset, "--out", out) == 0
    with csv_dataset.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    paths = [(csv_dataset.parent / row["path"]).resolve() for row in rows]
    saved = read_embeddings(out)
    assert saved["ids"].tolist() == [str(path) for path in paths]
    assert saved["labels"].tolist() == [row["label"] for row in rows]  # strings: not every label is an integer
    assert saved["split"].tolist() == [row["split"] for row in rows]
    assert saved["embeddings"].dtype == np.float32 and saved["embeddings"].shape == (len(rows), encoder.dim)
    np.testing.assert_allclose(saved["embeddings"], _reference(encoder, paths), atol=1e-5)
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left behind


def test_a_folder_gives_subfolder_labels_and_integer_labels_stay_integers(tmp_path, tiny_checkpoint, encoder):
    files = write_class_folders(tmp_path / "images", ["17", "4"])
    out = tmp_path / "embeddings.npz"
    assert _embed("--checkpoint", tiny_checkpoint, "--images", tmp_path / "images", "--out", out) == 0
    saved = read_embeddings(out)
    paths = sorted(path.resolve() for paths in files.values() for path in paths)
    assert saved["ids"].tolist() == [str(path) for path in paths]
    assert saved["labels"].dtype == np.int64 and saved["labels"].tolist() == [
        int(p.relative_to(tmp_path / "images").parts[0]) for p in paths
    ]
    np.testing.assert_allclose(saved["embeddings"], _reference(encoder, paths), atol=1e-5)


def test_a_configured_dataset_embeds_its_gallery_with_the_protocol_columns(tmp_path, tiny_checkpoint, encoder):
    expected = write_inshop(tmp_path / "inshop")
    out = tmp_path / "gallery.parquet"
    data = ["--set", "data.name=inshop", "--set", f"data.root={tmp_path / 'inshop'}"]
    assert _embed("--checkpoint", tiny_checkpoint, *data, "--split", "gallery", "--out", out) == 0
    saved = read_embeddings(out)
    gallery = [path.resolve() for path, flag in zip(expected.paths["test"], expected.gallery, strict=True) if flag]
    assert saved["ids"].tolist() == [str(path) for path in gallery]
    assert set(saved["is_gallery"].tolist()) == {1} and set(saved["split"].tolist()) == {"test"}  # typed: int flags
    assert saved["labels"].tolist() == [path.parts[-2] for path in gallery]  # the In-Shop item ids
    np.testing.assert_allclose(saved["embeddings"], _reference(encoder, gallery), atol=1e-5)


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
