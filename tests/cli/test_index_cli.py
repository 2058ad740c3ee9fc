"""`retrieval index build|query|add|remove|eval` end to end on a tiny CSV dataset and checkpoint."""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from retrieval.cli._index_common import format_measurement
from retrieval.cli.main import main
from retrieval.core.rerank import DatabaseAugmentation, augment_vectors
from retrieval.index import SearchIndex
from retrieval.index.gallery import IndexGallery
from retrieval.index.locking import writer_lock
from retrieval.index.manifest import Measured
from retrieval.index.metadata import Metadata
from tests.cli.errors import error_line
from tests.index.index_faults import file_size_limit, lock_released_after

NO_WORKERS = ["--num-workers", "0"]


def _query(capsys, index: Path, *args: str) -> list[dict]:
    assert main(["index", "query", "--index", str(index), "--json", *NO_WORKERS, *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_checkpoint, csv_dataset_factory):
    """An index of every row of a 28-image CSV in which one image is corrupt; (csv, index dir, build output)."""
    root = tmp_path_factory.mktemp("cli")
    csv_path = csv_dataset_factory(root / "data")
    (csv_path.parent / "images" / "test_100_1.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    index = root / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(index)]
    return csv_path, index, _run_captured([*args, "--type", "flat", *NO_WORKERS])


def _run_captured(argv: list[str]) -> tuple[int, str, str]:
    """`main(argv)` with its stdout and stderr (capsys is function-scoped; this fixture is not)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_build_skips_the_unreadable_image_and_prints_a_summary(built):
    csv_path, index, (code, out, err) = built
    assert code == 0, err
    assert "skipped 1 unreadable image(s):" in err and "test_100_1.png" in err
    assert "vectors: 27 of 28 images (1 unreadable, skipped)" in out and f"index: {index} (flat: " in out
    for line in (
        "recall@10 vs exact: not measured: too few vectors (the index holds 27;",
        "latency, throughput: not measured (too few vectors)",
        "bytes/vector: ",
        "search parameters: none (exact search)",
    ):
        assert line in out
    assert (index / "manifest.json").is_file()


def test_query_finds_each_image_first_as_json_and_as_a_table(built, capsys):
    csv_path, index, _ = built
    image = csv_path.parent / "images" / "train_2_3.png"
    (answer,) = _query(capsys, index, "--image", str(image), "-k", "3")
    first = answer["results"][0]
    assert answer["query"] == str(image) and len(answer["results"]) == 3
    assert first["rank"] == 1 and first["path"] == str(image.resolve()) and first["score"] == pytest.approx(1, abs=1e-4)
    assert first["label"] == "2" and first["split"] == "train"

    assert main(["index", "query", "--index", str(index), "--image", str(image), *NO_WORKERS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query: {image}" and lines[1].split() == ["rank", "score", "id", "label", "path"]
    assert len(lines) == 2 + 10
    rank, score, item_id, label, path = lines[2].split()
    assert (rank, label, path, item_id) == ("1", "2", str(image.resolve()), str(first["id"]))


def test_a_query_with_nothing_above_the_min_score_says_no_match(built, capsys, tmp_path):
    """The table's line for a query whose every result scores under `--min-score` (the printed line of
    `tests/evaluate/test_verification.py`'s query of noise, which checks the answer through `query_index`)."""
    _, index, _ = built
    other = tmp_path / "other.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(other)
    table = ["index", "query", "--index", str(index), "--image", str(other), "--num-workers", "0"]
    assert main([*table, "--min-score", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "no match above 1.0000"


def test_query_reranks_with_query_expansion(built, capsys):
    csv_path, index, _ = built
    image = csv_path.parent / "images" / "train_2_3.png"
    (plain,) = _query(capsys, index, "--image", str(image), "-k", "5")
    (expanded,) = _query(capsys, index, "--image", str(image), "-k", "5", "--rerank", "qe:k=1,alpha=0")
    # Expanding with its own first result (itself, score 1) gives the query back: the same ranking.
    assert [r["id"] for r in expanded["results"]] == [r["id"] for r in plain["results"]]
    assert main(["index", "query", "--index", str(index), "--image", str(image), "--rerank", "dba"]) == 2
    assert "dba re-ranks the stored vectors" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["qe:k=10,alpha=0", "kreciprocal"])
def test_an_indexed_image_comes_back_first_when_reranked(built, capsys, spec):
    """`qe:k=10,alpha=0` (what `evaluate --rerank qe` chose on validation) once put the image itself at rank 6."""
    csv_path, index, _ = built
    images = sorted((csv_path.parent / "images").glob("train_*.png"))
    answers = _query(capsys, index, "--image", *map(str, images), "-k", "3", "--rerank", spec)
    for image, answer in zip(images, answers, strict=True):
        first = answer["results"][0]
        assert first["path"] == str(image.resolve()) and first["score"] == pytest.approx(1, abs=1e-4), image.name


def test_build_with_dba_stores_augmented_vectors_and_add_augments_new_ones(built, tiny_checkpoint, capsys, tmp_path):
    csv_path, plain_dir, _ = built
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--type", "flat"]
    assert main([*args, "--out", str(tmp_path / "dba"), "--rerank", "dba:k=3,alpha=1", *NO_WORKERS]) == 0
    plain, dba = SearchIndex.load(plain_dir), SearchIndex.load(tmp_path / "dba")
    assert dba.manifest.database_augmentation == "dba:k=3,alpha=1"
    ids = plain.ids
    expected = augment_vectors(np.stack([plain.reconstruct(i) for i in ids]), 3, 1.0)
    np.testing.assert_allclose(np.stack([dba.reconstruct(i) for i in ids]), expected, atol=1e-5)

    image = csv_path.parent / "images" / "train_2_3.png"
    new = tmp_path / "new"
    new.mkdir()
    (new / "copy.png").write_bytes(image.read_bytes())
    own = plain.reconstruct(int(ids[[r["path"] for r in plain.metadata_for(ids)].index(str(image.resolve()))]))
    added = DatabaseAugmentation(k=3, alpha=1.0).added(IndexGallery(dba), own[None])[0]
    assert main(["index", "add", "--index", str(tmp_path / "dba"), "--images", str(new), *NO_WORKERS]) == 0
    np.testing.assert_allclose(SearchIndex.load(tmp_path / "dba").reconstruct(dba.ntotal), added, atol=1e-5)
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "qe"), "--rerank", "qe", *NO_WORKERS]) == 2
    assert "qe re-ranks queries, not the stored vectors" in capsys.readouterr().err


def test_a_folder_of_queries(built, capsys, tmp_path):
    csv_path, index, _ = built
    for name in ("train_0_0.png", "test_101_2.png"):
        shutil.copy(csv_path.parent / "images" / name, tmp_path / name)
    answers = _query(capsys, index, "--images", str(tmp_path), "-k", "1")
    assert [Path(a["results"][0]["path"]).name for a in answers] == ["test_101_2.png", "train_0_0.png"]


def test_add_remove_and_eval_update_the_index_atomically(built, capsys, tmp_path):
    csv_path, original, _ = built
    index = tmp_path / "index"
    shutil.copytree(original, index)
    new = tmp_path / "new" / "zebra"
    new.mkdir(parents=True)
    for i, colour in enumerate([(250, 250, 250), (5, 5, 5)]):
        Image.new("RGB", (40, 40), colour).save(new / f"{i}.png")
    assert main(["index", "add", "--index", str(index), "--images", str(new.parent), *NO_WORKERS]) == 0
    out = capsys.readouterr().out
    assert "added 2 vectors" in out and "the index holds 29" in out

    (answer,) = _query(capsys, index, "--image", str(new / "1.png"), "-k", "2")
    top = answer["results"][0]
    assert top["path"] == str((new / "1.png").resolve()) and top["label"] == "zebra"

    assert main(["index", "remove", "--index", str(index), "--ids", str(top["id"])]) == 0
    assert "removed 1 vectors; the index holds 28" in capsys.readouterr().out
    (answer,) = _query(capsys, index, "--image", str(new / "1.png"), "-k", "28")
    assert top["id"] not in [r["id"] for r in answer["results"]] and len(answer["results"]) == 28

    assert main(["index", "eval", "--index", str(index), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["k"] == 10 and metrics["ntotal"] == 28 and 0 <= metrics["recall_at_k"] <= 1
    assert main(["index", "eval", "--index", str(original), "-k", "5"]) == 0
    out = capsys.readouterr().out
    assert "recall@5 vs exact: " in out and "27 vectors" in out


def test_a_split_of_the_csv(tmp_path, tiny_checkpoint, csv_dataset, capsys):
    index = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_dataset), "--out", str(index)]
    assert main([*args, "--split", "test", *NO_WORKERS]) == 0
    assert "vectors: 12 of 12 images" in capsys.readouterr().out
    with csv_dataset.open(newline="") as handle:
        test_paths = {
            str((csv_dataset.parent / r["path"]).resolve()) for r in csv.DictReader(handle) if r["split"] == "test"
        }
    (answer,) = _query(capsys, index, "--image", str(next(iter(test_paths))), "-k", "12")
    assert {r["path"] for r in answer["results"]} == test_paths


def test_a_csv_of_paths_only_builds_an_index(tmp_path, tiny_checkpoint, csv_dataset, capsys):
    with csv_dataset.open(newline="") as handle:
        paths = [row["path"] for row in csv.DictReader(handle)][:5]
    only_paths = csv_dataset.parent / "paths.csv"
    only_paths.write_text("path\n" + "\n".join(paths) + "\n")
    index = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(only_paths), "--out", str(index)]
    assert main([*args, *NO_WORKERS]) == 0
    assert "vectors: 5 of 5 images" in capsys.readouterr().out


def _flagged_csv(csv_dataset: Path, gallery_flags: list[str]) -> Path:
    """The dataset CSV plus an is_gallery column cycling through `gallery_flags` (test rows only are flagged)."""
    with csv_dataset.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    test_rows = [row for row in rows if row["split"] == "test"]
    for i, row in enumerate(test_rows):
        row["is_gallery"] = gallery_flags[i % len(gallery_flags)]
    flagged = csv_dataset.parent / "flagged.csv"
    with flagged.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "split", "is_gallery"])
        writer.writeheader()
        writer.writerows(rows)
    return flagged


def test_the_gallery_split_reads_every_spelling_of_the_flag(tmp_path, tiny_checkpoint, csv_dataset, capsys):
    flagged = _flagged_csv(csv_dataset, ["yes", "No", "TRUE", "", "0", "1"])
    index = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(flagged), "--out", str(index)]
    assert main([*args, "--split", "gallery", *NO_WORKERS]) == 0
    assert "vectors: 6 of 6 images" in capsys.readouterr().out  # 3 of each 6 of the 12 test rows


@pytest.mark.parametrize("split", ["gallery", "all"])
def test_an_unknown_flag_value_is_one_line_naming_the_file_line_and_value(
    split, tmp_path, tiny_checkpoint, csv_dataset, capsys
):
    """A value the format does not know is an error wherever it is, not a silent 'no'."""
    flagged = _flagged_csv(csv_dataset, ["1", "0", "maybe"])
    out = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(flagged), "--out", str(out)]
    assert main([*args, "--split", split, *NO_WORKERS]) == 2
    line = error_line(capsys)
    assert line == f"error: {flagged}:20: is_gallery must be 0/1, true/false or yes/no, got 'maybe'"


def test_a_checkpoint_other_than_the_index_one_is_refused(built, other_checkpoint, capsys):
    csv_path, index, _ = built
    image = csv_path.parent / "images" / "train_0_0.png"
    args = ["index", "query", "--index", str(index), "--image", str(image), "--checkpoint", str(other_checkpoint)]
    assert main(args) == 2
    assert "is not the one this index was built with" in error_line(capsys)
    assert (
        main(
            [
                "index",
                "add",
                "--index",
                str(index),
                "--images",
                str(image.parent),
                "--checkpoint",
                str(other_checkpoint),
            ]
        )
        == 2
    )
    assert "is not the one this index was built with" in error_line(capsys)


def test_an_unreadable_query_image_is_one_line(built, capsys, tmp_path):
    csv_path, index, _ = built
    broken = tmp_path / "query.jpg"
    broken.write_bytes(b"not a jpeg")
    assert main(["index", "query", "--index", str(index), "--image", str(broken), *NO_WORKERS]) == 2
    line = error_line(capsys)
    assert "cannot read query image" in line and "query.jpg" in line
    assert main(["index", "query", "--index", str(index), "--image", str(tmp_path / "missing.png"), *NO_WORKERS]) == 2
    assert f"query image not found: {tmp_path / 'missing.png'}" in error_line(capsys)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "--index", "{tmp}/none", "--image", "x.png"], "none"),
        (["query", "--index", "{index}", "--image", "x.png", "-k", "0"], "-k must be between 1 and 1000"),
        (["remove", "--index", "{index}", "--ids", "12345"], "12345"),
        (["build", "--checkpoint", "{tmp}/none.pt", "--csv", "{csv}", "--out", "{tmp}/i"], "checkpoint not found"),
        (["build", "--checkpoint", "{ckpt}", "--images", "{tmp}/empty", "--out", "{tmp}/i"], "image folder not found"),
        (["build", "--checkpoint", "{ckpt}", "--csv", "{tmp}/none.csv", "--out", "{tmp}/i"], "CSV not found"),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2(args, message, built, tiny_checkpoint, tmp_path, capsys):
    csv_path, index, _ = built
    values = {"tmp": str(tmp_path), "index": str(index), "ckpt": str(tiny_checkpoint), "csv": str(csv_path)}
    assert main(["index", *[arg.format(**values) for arg in args]]) == 2
    assert message in error_line(capsys)


def _copied(built, tmp_path: Path) -> Path:
    """A copy of the built index that a test may change."""
    index = tmp_path / "index"
    shutil.copytree(built[1], index)
    return index


def _ids(index: Path) -> list[int]:
    return SearchIndex.load(index).ids.tolist()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock"))


@pytest.mark.parametrize("value", [str(2**63), str(2**70), "-1"])
def test_an_id_outside_the_id_range_is_one_line(value, built, capsys, tmp_path):
    index = _copied(built, tmp_path)
    assert main(["index", "remove", "--index", str(index), "--ids", "3", value]) == 2
    line = error_line(capsys)
    assert value in line and ("out of range" in line or "unknown id" in line)
    assert len(_ids(index)) == 27


def test_a_writer_waits_for_another_then_gives_up_naming_its_pid(built, capsys, tmp_path):
    index = _copied(built, tmp_path)
    with writer_lock(index):
        assert main(["index", "remove", "--index", str(index), "--ids", "3", "--lock-timeout", "0.2"]) == 2
    line = error_line(capsys)
    assert f"is being written by process {os.getpid()}: gave up after waiting 0.2 s" in line
    assert "--lock-timeout" in line and 3 in _ids(index)


def test_a_writer_proceeds_when_the_other_finishes(built, capsys, tmp_path):
    index = _copied(built, tmp_path)
    with lock_released_after(index, 0.3):
        assert main(["index", "remove", "--index", str(index), "--ids", "3"]) == 0
    assert "removed 1 vectors; the index holds 26" in capsys.readouterr().out


def _read_only_file_system(monkeypatch) -> None:
    """Creating the lock file fails as on a read-only mount (the first write `add`/`remove` makes)."""
    original = os.open

    def refuse_lock_files(path, flags, *args, **kwargs):
        if str(path).endswith(".lock") and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return original(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse_lock_files)


def _full_disk_in_metadata(monkeypatch) -> None:
    def full(self, path: Path) -> None:
        path.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(Metadata, "write", full)


@pytest.mark.parametrize(
    ("failure", "reason", "hint"),
    [
        ("read-only", "Read-only file system", "read-only file system: copy it somewhere writable"),
        ("full", "No space left on device", "free space on its file system"),
        ("file size limit", "File too large", "raise the file size limit"),
    ],
)
def test_a_write_that_fails_is_one_line_and_loses_nothing(failure, reason, hint, built, capsys, tmp_path, monkeypatch):
    index = _copied(built, tmp_path)
    if failure == "read-only":
        _read_only_file_system(monkeypatch)
    elif failure == "full":
        _full_disk_in_metadata(monkeypatch)
    with file_size_limit(1024) if failure == "file size limit" else contextlib.nullcontext():
        code = main(["index", "remove", "--index", str(index), "--ids", "3"])
    assert code == 2
    line = error_line(capsys)
    assert line.startswith(f"error: cannot write index {index}: {reason}") and hint in line
    assert line.endswith("the index is unchanged")
    monkeypatch.undo()
    assert len(_ids(index)) == 27 and 3 in _ids(index)
    assert _leftovers(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_a_read_only_index_directory_is_one_line(built, capsys, tmp_path):
    index = _copied(built, tmp_path)
    index.chmod(0o555)
    try:
        assert main(["index", "remove", "--index", str(index), "--ids", "3"]) == 2
    finally:
        index.chmod(0o755)
    line = error_line(capsys)
    assert "the index directory is read-only" in line and "writable by this user" in line
    assert 3 in _ids(index)


def test_a_hand_edited_manifest_field_is_one_line_naming_it(built, capsys, tmp_path):
    index = _copied(built, tmp_path)
    manifest = json.loads((index / "manifest.json").read_text())
    del manifest["next_id"]
    manifest["files"]["index.faiss"]["size"] = str(manifest["files"]["index.faiss"]["size"])
    (index / "manifest.json").write_text(json.dumps(manifest))
    assert main(["index", "remove", "--index", str(index), "--ids", "3"]) == 2
    assert "lacks next_id" in error_line(capsys)
    manifest["next_id"] = 27
    (index / "manifest.json").write_text(json.dumps(manifest))
    assert main(["index", "eval", "--index", str(index)]) == 2
    assert "manifest.json.files must be" in error_line(capsys)


def _csv_of(csv_dataset: Path, paths: list[str]) -> Path:
    listed = csv_dataset.parent / "listed.csv"
    listed.write_text("path,label\n" + "".join(f"{path},{i % 3}\n" for i, path in enumerate(paths)))
    return listed


def test_eval_of_a_tiny_index_prints_no_figure_from_too_few_queries(tmp_path, tiny_checkpoint, csv_dataset, capsys):
    with csv_dataset.open(newline="") as handle:
        paths = [row["path"] for row in csv.DictReader(handle)][:10]
    index = tmp_path / "index"
    build = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--out", str(index), *NO_WORKERS]
    assert main([*build, "--csv", str(_csv_of(csv_dataset, paths))]) == 0
    capsys.readouterr()
    assert main(["index", "eval", "--index", str(index), "-k", "10"]) == 0
    out = capsys.readouterr().out
    assert "recall@10 vs exact: not measured: too few vectors (the index holds 10;" in out
    assert "latency, throughput: not measured (too few vectors)" in out and "queries/s" not in out


def test_a_measurement_of_an_index_smaller_than_k_says_what_it_counts() -> None:
    measured = {
        "recall_at_k": 1.0,
        "k": 200,
        "neighbors": 149,
        "queries": 150,
        "p50_ms": 0.02,
        "p99_ms": 0.1,
        "batch_qps": 5000.0,
        "batch_threads": 2,
        "resident_bytes_per_vector": 520.0,
        "disk_bytes_per_vector": 520.0,
    }
    lines = format_measurement(Measured.model_validate(measured)).splitlines()
    assert lines[0] == (
        "recall@200 vs exact: 1.0000 (150 queries); each query has only 149 other vectors to find, "
        "so recall counts those 149"
    )
    assert lines[1:] == [
        "latency p50 / p99: 0.020 / 0.100 ms (one query, one thread)",
        "batch throughput: 5,000 queries/s (2 threads)",
        "bytes/vector: 520.0 in memory, 520.0 on disk",
    ]
    lines = format_measurement(Measured.model_validate({**measured, "queries": 99})).splitlines()
    assert lines[0].startswith("recall@200 vs exact: not measured: too few vectors") and "queries/s" not in lines[1]


def test_build_of_one_readable_image_says_recall_cannot_be_measured(tmp_path, tiny_checkpoint, csv_dataset, capsys):
    (csv_dataset.parent / "notes.txt").write_text("not an image")
    (csv_dataset.parent / "images" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    listed = _csv_of(csv_dataset, ["images/train_0_0.png", "notes.txt", "images/broken.png"])
    index = tmp_path / "index"
    args = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(listed), "--out", str(index)]
    assert main([*args, *NO_WORKERS]) == 0
    out = capsys.readouterr().out
    assert "vectors: 1 of 3 images (2 unreadable, skipped)" in out
    assert "recall@10 vs exact: not measured: too few vectors" in out and "0.0000" not in out


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_bad_lock_timeout_is_refused_before_anything_happens(value, built, capsys, tmp_path):
    index = _copied(built, tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "remove", "--index", str(index), "--ids", "3", "--lock-timeout", value])
    assert exit_info.value.code == 2
    assert "--lock-timeout: takes a number of seconds >= 0" in capsys.readouterr().err
    assert 3 in _ids(index)
