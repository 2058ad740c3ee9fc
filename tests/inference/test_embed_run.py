"""`retrieval embed` without the command line (`retrieval.inference.embed_run`): the file or the parts hold what the
encoder gives for the same images, from a CSV, a folder or a configured dataset, and a rerun of parts embeds only
what is missing."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest

from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.embedding_files.file_formats import read_embeddings
from retrieval.embedding_files.parts_layout import part_path, read_embedding_parts
from retrieval.errors import UserError
from retrieval.inference.embed_run import EmbedRequest, check_embed_request, run_embed
from retrieval.inference.image_encoder import ImageEncoder
from tests.data.official_layouts import write_class_folders, write_inshop
from tests.inference.parts_checks import assert_same

SUFFIXES = (".npz", ".npy", ".parquet")
PARTS = 6  # of conftest's `single_process_parts`


@pytest.fixture(scope="module")
def encoder(tiny_checkpoint):
    return ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")


def _embed(checkpoint: Path, out: Path | str, **fields: object):
    return run_embed(EmbedRequest(checkpoint, str(out), num_workers=0, device="cpu", **fields))


def _parts(checkpoint: Path, csv_path: Path, out: str):
    request = EmbedRequest(checkpoint, out, csv=csv_path, part_rows=8, batch_size=5, num_workers=0, device="cpu")
    return run_embed(request)


def _reference(encoder, paths):
    embedded = encoder.embed_files(paths, batch_size=5, progress=False)  # another batch size than the command's
    assert not embedded.failures
    return embedded.embeddings


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_csv_round_trip_matches_the_encoder(tmp_path, tiny_checkpoint, csv_dataset_factory, encoder, suffix):
    """Was `tests/cli/test_embed.py`'s test of the same name, through `main`."""
    csv_dataset = csv_dataset_factory(tmp_path / "data", train_classes=2, test_classes=2, per_class=2)
    out = tmp_path / f"out/embeddings{suffix}"
    report = _embed(tiny_checkpoint, out, csv=csv_dataset)
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
    assert report.text() == f"embeddings: {out} ({len(rows)} x {encoder.dim})"


def test_a_folder_gives_subfolder_labels_and_integer_labels_stay_integers(tmp_path, tiny_checkpoint, encoder):
    """Was `tests/cli/test_embed.py`'s test of the same name, through `main`."""
    files = write_class_folders(tmp_path / "images", ["17", "4"])
    out = tmp_path / "embeddings.npz"
    _embed(tiny_checkpoint, out, images=tmp_path / "images")
    saved = read_embeddings(out)
    paths = sorted(path.resolve() for paths in files.values() for path in paths)
    assert saved["ids"].tolist() == [str(path) for path in paths]
    assert saved["labels"].dtype == np.int64 and saved["labels"].tolist() == [
        int(p.relative_to(tmp_path / "images").parts[0]) for p in paths
    ]
    np.testing.assert_allclose(saved["embeddings"], _reference(encoder, paths), atol=1e-5)


def test_a_configured_dataset_embeds_its_gallery_with_the_protocol_columns(tmp_path, tiny_checkpoint, encoder):
    """Was `tests/cli/test_embed.py`'s test of the same name, through `main`."""
    expected = write_inshop(tmp_path / "inshop")
    out = tmp_path / "gallery.parquet"
    data = ("data.name=inshop", f"data.root={tmp_path / 'inshop'}")
    _embed(tiny_checkpoint, out, overrides=data, split="gallery")
    saved = read_embeddings(out)
    gallery = [path.resolve() for path, flag in zip(expected.paths["test"], expected.gallery, strict=True) if flag]
    assert saved["ids"].tolist() == [str(path) for path in gallery]
    assert set(saved["is_gallery"].tolist()) == {1} and set(saved["split"].tolist()) == {"test"}  # typed: int flags
    assert saved["labels"].tolist() == [path.parts[-2] for path in gallery]  # the In-Shop item ids
    np.testing.assert_allclose(saved["embeddings"], _reference(encoder, gallery), atol=1e-5)


def test_the_parts_record_the_images_as_named_with_their_paths_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoint = Path("best.pt")
    assert EmbedRequest(checkpoint, "out/", csv=Path("data.csv"), split="test").source_spec() == ImageSourceSpec(
        csv=str(tmp_path / "data.csv"), split="test"
    )
    assert EmbedRequest(checkpoint, "out/", images=Path("imgs")).source_spec() == ImageSourceSpec(
        images=str(tmp_path / "imgs"), split="all"
    )
    dataset = ("data.name=cub200", "data.root=/data/cub")
    assert EmbedRequest(checkpoint, "out/", overrides=dataset).source_spec() == ImageSourceSpec(
        set=list(dataset), split="all"
    )


def test_a_set_key_outside_data_is_refused_before_the_checkpoint_is_read(tmp_path, tiny_checkpoint):
    request = EmbedRequest(tiny_checkpoint, str(tmp_path / "x.npz"), overrides=("data.name=csv", "model.pooling=avg"))
    with pytest.raises(UserError, match=r"embed --set takes data\.\* keys only .*got 'model.pooling=avg'"):
        check_embed_request(request)


def test_one_process_writes_the_layout_with_the_rows_of_a_one_file_output(
    tmp_path, tiny_checkpoint, parts_dataset, single_process_parts
):
    """Was `tests/cli/test_embed_parts.py`'s test of the same name, through `main`."""
    names = sorted(path.name for path in single_process_parts.iterdir())
    assert names == sorted(
        ["_SUCCESS", "_job.json", *(f"part-{p:05d}.{ext}" for p in range(PARTS) for ext in ("parquet", "json"))]
    )
    one_file = tmp_path / "embeddings.parquet"
    run_embed(EmbedRequest(tiny_checkpoint, str(one_file), csv=parts_dataset))
    expected = read_embeddings(one_file)
    assert len(expected["ids"]) == 41
    assert_same(read_embedding_parts(single_process_parts), expected)
    encoder = ImageEncoder.from_checkpoint(tiny_checkpoint, device="cpu")
    reference = encoder.embed_files(expected["ids"].tolist(), batch_size=7, progress=False).embeddings
    np.testing.assert_allclose(read_embedding_parts(single_process_parts)["embeddings"], reference, atol=1e-5)


def test_a_rerun_of_a_finished_job_embeds_nothing(tiny_checkpoint, parts_dataset, single_process_parts, monkeypatch):
    """Was `tests/cli/test_embed_parts.py`'s test of the same name, through `main` (its line: `text()`)."""
    before = {path.name: path.read_bytes() for path in single_process_parts.glob("part-*")}

    def no_embedding(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished part was embedded again")

    monkeypatch.setattr(ImageEncoder, "embed_files", no_embedding)
    report = _parts(tiny_checkpoint, parts_dataset, str(single_process_parts))  # an existing folder: no slash needed
    assert "0 embedded now, 6 already done" in report.text()
    assert {path.name: path.read_bytes() for path in single_process_parts.glob("part-*")} == before


def test_a_corrupt_part_is_detected_and_rewritten_by_a_rerun(
    tmp_path, tiny_checkpoint, parts_dataset, single_process_parts
):
    """Was `tests/cli/test_embed_parts.py`'s test of the same name, through `main` (its line: `text()`)."""
    out = shutil.copytree(single_process_parts, tmp_path / "parts")
    damaged = part_path(out, 3)
    damaged.write_bytes(damaged.read_bytes()[:-10])
    with pytest.raises(UserError, match="part-00003.parquet is missing or does not match its .json"):
        read_embedding_parts(out)
    report = _parts(tiny_checkpoint, parts_dataset, f"{out}/")
    assert "1 embedded now, 5 already done" in report.text()
    assert_same(read_embedding_parts(out), read_embedding_parts(single_process_parts))
