"""`retrieval audit` on the command line: what it prints, and one-line errors on bad input (exit code 2).

What an audit finds and writes is tested as a library call (`tests/export/test_audit_run.py`) and in `tests/audit/`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from retrieval.audit.findings import AuditSummary
from retrieval.cli.main import main
from tests.conftest import add_train_copy_as_test


def _with_copy(csv_dataset: Path) -> Path:
    """The dataset CSV plus a byte-identical copy of a train image listed as test: a duplicate and a leak."""
    return add_train_copy_as_test(csv_dataset, "copy.png", 0)


@pytest.mark.slow  # embeds images with a model
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


def test_audit_out_naming_a_file_is_one_line_before_the_model_or_the_csv_is_read(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    missing = [str(tmp_path / "missing.pt"), str(tmp_path / "missing.csv")]
    for out in (taken, taken / "report"):
        code = main(["audit", "--checkpoint", missing[0], "--csv", missing[1], "--out", str(out)])
        error = capsys.readouterr().err.strip()
        assert code == 2 and len(error.splitlines()) == 1 and f"report folder {out.absolute()}" in error
        assert "is a file" in error or f"is under the file {taken}" in error
    assert taken.read_text() == "mine"


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


def test_every_count_and_warning_of_the_summary_is_one_printed_line(tmp_path, capsys, monkeypatch):
    """The printing alone, on a summary of every section: the audit is `run_audit`'s (patched here)."""
    summary = AuditSummary(
        images=40,
        k=10,
        exact_graph=True,
        threshold=0.97,
        threshold_source="FMR 1e-4 on 300 different-label pairs",
        exact_duplicate_groups=1,
        near_duplicate_groups=2,
        leak_ratio=0.5,
        leaked_rows=3,
        recoloured_leaks=1,
        test_nearest_neighbour_leak_share=0.25,
        label_issues=4,
        outliers=5,
        confused_class_pairs=0,
        left_out=[],
        warnings=["warning: one near-duplicate group holds 30 of the 40 images (75%)", "warning: second"],
    )
    monkeypatch.setattr("retrieval.export.audit_run.run_audit", lambda request: summary)
    listing = tmp_path / "images.csv"
    listing.write_text("path\nx.png\n")
    out = tmp_path / "r"
    assert main(["audit", "--model", str(tmp_path), "--csv", str(listing), "--out", str(out), "-k", "7"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"report: {out / 'index.html'}",
        "near-duplicate threshold: 0.9700 (FMR 1e-4 on 300 different-label pairs)",
        "exact duplicate groups: 1",
        "near duplicate groups: 2",
        "leaked rows: 3",
        "recoloured leaks: 1",
        "label issues: 4",
        "outliers: 5",
        "test queries whose nearest neighbour is a leak: 0.2500",
        *summary.warnings,
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--threshold", "2"], "audit.threshold must be a cosine in [-1, 1], got 2.0"),
        (["-k", "0"], "audit.k must be"),
        (["--set", "audit.checks=[exact_duplicates]", "--no-hash"], "--no-hash leaves audit.checks with no check"),
        (["--set", "audit.kk=3"], "unknown config key audit.kk"),
    ],
)
def test_the_flags_set_the_same_keys_and_fail_before_any_image_is_read(tmp_path, capsys, flags, message):
    listing = tmp_path / "images.csv"
    listing.write_text("path\nmissing.png\n")  # never read: the settings fail first
    code = main(
        ["audit", "--model", str(tmp_path / "no-export"), "--csv", str(listing), "--out", str(tmp_path / "r"), *flags]
    )
    assert code == 2
    assert message in capsys.readouterr().err
