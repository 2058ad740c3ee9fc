"""`retrieval audit` end to end with a tiny checkpoint: the report folder, and one-line errors on bad input."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from retrieval.checkpoint import Checkpoint
from retrieval.cli.main import main
from tests.conftest import add_train_copy_as_test

pytestmark = pytest.mark.slow  # embeds images with a model


def _with_copy(csv_dataset: Path) -> Path:
    """The dataset CSV plus a byte-identical copy of a train image listed as test: a duplicate and a leak."""
    return add_train_copy_as_test(csv_dataset, "copy.png", 0)


def test_audit_writes_the_report_and_finds_the_copy(csv_dataset, tiny_checkpoint, tmp_path, capsys):
    dataset = _with_copy(csv_dataset)
    out = tmp_path / "report"
    code = main(["audit", "--checkpoint", str(tiny_checkpoint), "--csv", str(dataset), "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"report: {out / 'index.html'}" in printed and "exact duplicate groups: 1" in printed
    assert "near-duplicate threshold: " in printed and "different-label pairs" in printed
    with (out / "leaks.csv").open() as handle:
        leaks = list(csv.DictReader(handle))
    copy = str((dataset.parent / "images" / "copy.png").resolve())
    assert copy in {row["path"] for row in leaks}
    assert (out / "label_issues.csv").is_file() and (out / "index.html").stat().st_size > 1000


def test_a_csv_without_labels_or_splits_gets_duplicates_and_says_what_is_left_out_once(
    csv_dataset, tiny_checkpoint, tmp_path, capsys
):
    dataset = _with_copy(csv_dataset)
    listing = tmp_path / "images.csv"
    rows = dataset.read_text().splitlines()[1:]
    listing.write_text("path\n" + "".join(f"{dataset.parent / row.split(',')[0]}\n" for row in rows))
    out = tmp_path / "report"
    assert main(["audit", "--checkpoint", str(tiny_checkpoint), "--csv", str(listing), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("no split column") == 1 and printed.count("no label column") == 1
    assert "exact duplicate groups: 1" in printed and "leaked rows" not in printed
    assert not (out / "leaks.csv").exists() and not (out / "label_issues.csv").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name\nx.png\n", "lacks column(s) path"),
        ("path,split\nx.png,holdout\n", "split must be train, val or test"),
        ("path\n", "has a header but no rows"),
    ],
)
def test_bad_csvs_are_one_line_errors(tmp_path, tiny_checkpoint, capsys, content, message):
    listing = tmp_path / "bad.csv"
    listing.write_text(content)
    code = main(["audit", "--checkpoint", str(tiny_checkpoint), "--csv", str(listing), "--out", str(tmp_path / "r")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and message in error and len(error.splitlines()) == 1


def test_a_missing_checkpoint_is_a_one_line_error(csv_dataset, tmp_path, capsys):
    out = tmp_path / "report"  # a new folder: the folder of the CSV is no report to replace
    code = main(["audit", "--checkpoint", str(tmp_path / "no.pt"), "--csv", str(csv_dataset), "--out", str(out)])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "checkpoint not found" in error and len(error.splitlines()) == 1


def test_an_index_is_audited_from_its_stored_vectors_and_columns(csv_dataset, tiny_checkpoint, tmp_path, capsys):
    dataset = _with_copy(csv_dataset)
    index = tmp_path / "index"
    assert (
        main(["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(dataset), "--out", str(index)]) == 0
    )
    out = tmp_path / "report"
    capsys.readouterr()
    assert main(["audit", "--index", str(index), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "audit: embedding" not in printed and "exact duplicate groups: 1" in printed  # no model ran
    with (out / "leaks.csv").open() as handle:
        leaks = list(csv.DictReader(handle))
    assert str((dataset.parent / "images" / "copy.png").resolve()) in {row["path"] for row in leaks}
    with (out / "label_issues.csv").open() as handle:
        assert {row["split"] for row in csv.DictReader(handle)} <= {"train", "val", "test"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--csv needs --checkpoint CKPT or --model EXPORT_DIR"),
        (["--index", "x", "--checkpoint", "y"], "--index audits the vectors it holds"),
    ],
)
def test_a_source_without_its_model_or_with_one_too_many_is_a_one_line_error(tmp_path, capsys, extra, message):
    listing = tmp_path / "images.csv"
    listing.write_text("path\nx.png\n")
    arguments = ["audit", "--out", str(tmp_path / "r"), *(extra or ["--csv", str(listing)])]
    code = main(arguments)
    error = capsys.readouterr().err.strip()
    assert code == 2 and message in error and len(error.splitlines()) == 1


def test_a_checkpoint_selected_at_a_low_recall_warns_in_one_line_printed_and_on_the_page(
    csv_dataset, tiny_checkpoint, tmp_path, capsys
):
    """Issue 49 #4: the checkpoint's own record said it retrieves poorly, and the audit did not say so."""
    checkpoint = Checkpoint.read(tiny_checkpoint)
    poor = tmp_path / "poor.pt"
    dataclasses.replace(checkpoint, best_score=0.25, best_epoch=2).save(poor)
    out = tmp_path / "report"
    assert main(["audit", "--checkpoint", str(poor), "--csv", str(csv_dataset), "--out", str(out), "--no-hash"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "not to be trusted" in line]
    assert line.startswith("warning: this checkpoint's Recall@1 at model selection is 0.2500 (epoch 2)")
    assert line in (out / "index.html").read_text().replace("&#x27;", "'")
