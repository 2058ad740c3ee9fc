"""`retrieval.export.audit_run`: an audit as a library call, from a CSV with a model or from an index directory."""

from __future__ import annotations

import csv
import dataclasses
import logging
from pathlib import Path

import pytest

from retrieval.checkpoint import Checkpoint
from retrieval.config import AuditConfig
from retrieval.errors import UserError
from retrieval.export.audit_run import AuditRequest, run_audit
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from tests.conftest import add_train_copy_as_test

pytestmark = pytest.mark.slow  # embeds images with a model


def _leaked_paths(report: Path) -> set[str]:
    with (report / "leaks.csv").open() as handle:
        return {row["path"] for row in csv.DictReader(handle)}


def test_a_csv_without_labels_or_splits_gets_duplicates_and_says_what_is_left_out_once(
    csv_dataset, tiny_checkpoint, tmp_path, caplog
):
    """Was `tests/audit/test_audit_cli.py`'s test of the same name (the notes printed once there)."""
    dataset = add_train_copy_as_test(csv_dataset, "copy.png", 0)  # a duplicate and a leak
    listing = tmp_path / "images.csv"
    rows = dataset.read_text().splitlines()[1:]
    listing.write_text("path\n" + "".join(f"{dataset.parent / row.split(',')[0]}\n" for row in rows))
    out = tmp_path / "report"
    request = AuditRequest(out, AuditConfig(), csv=listing, encoder=EncoderChoice(checkpoint=tiny_checkpoint))
    with caplog.at_level(logging.INFO, logger="retrieval"):
        summary = run_audit(request)
    said = "\n".join(caplog.messages)
    assert said.count("no split column") == 1 and said.count("no label column") == 1
    assert summary.exact_duplicate_groups == 1 and summary.leaked_rows is None and summary.label_issues is None
    assert not (out / "leaks.csv").exists() and not (out / "label_issues.csv").exists()


def test_an_index_is_audited_from_its_stored_vectors_and_columns(csv_dataset, tiny_checkpoint, tmp_path, caplog):
    """Was `tests/audit/test_audit_cli.py`'s test of the same name, through `main` there."""
    dataset = add_train_copy_as_test(csv_dataset, "copy.png", 0)  # a duplicate and a leak
    index = tmp_path / "index"
    build_index(IndexBuildRequest(index, encoder=EncoderChoice(checkpoint=tiny_checkpoint), csv=dataset))
    out = tmp_path / "report"
    with caplog.at_level(logging.INFO, logger="retrieval"):
        summary = run_audit(AuditRequest(out, AuditConfig(), index=index))
    assert not any(message.startswith("embedding") for message in caplog.messages)  # no model ran
    assert summary.exact_duplicate_groups == 1
    assert str((dataset.parent / "images" / "copy.png").resolve()) in _leaked_paths(out)
    with (out / "label_issues.csv").open() as handle:
        assert {row["split"] for row in csv.DictReader(handle)} <= {"train", "val", "test"}


def test_a_checkpoint_selected_at_a_low_recall_warns_in_the_summary_and_on_the_page(
    csv_dataset, tiny_checkpoint, tmp_path
):
    """Issue 49 #4: the checkpoint's own record said it retrieves poorly, and the audit did not say so. Was
    `tests/audit/test_audit_cli.py::test_a_checkpoint_selected_at_a_low_recall_warns_in_one_line_printed_and_on_the_page`
    (the CLI prints each of the summary's warnings as a line: `tests/cli/test_audit_cli.py`)."""
    checkpoint = Checkpoint.read(tiny_checkpoint)
    poor = tmp_path / "poor.pt"
    dataclasses.replace(checkpoint, best_score=0.25, best_epoch=2).save(poor)
    out = tmp_path / "report"
    settings = AuditConfig(checks=[check for check in AuditConfig().checks if check != "exact_duplicates"])
    summary = run_audit(AuditRequest(out, settings, csv=csv_dataset, encoder=EncoderChoice(checkpoint=poor)))
    (line,) = [line for line in summary.warnings if "not to be trusted" in line]
    assert line.startswith("warning: this checkpoint's Recall@1 at model selection is 0.2500 (epoch 2)")
    assert line in (out / "index.html").read_text().replace("&#x27;", "'")


def test_a_request_takes_one_source_and_the_model_its_source_needs(tmp_path, tiny_checkpoint):
    with pytest.raises(ValueError, match="one of csv and index"):
        AuditRequest(tmp_path / "r", AuditConfig())
    listing = tmp_path / "images.csv"
    listing.write_text("path\nx.png\n")
    with pytest.raises(UserError, match="--csv needs --checkpoint CKPT or --model EXPORT_DIR"):
        run_audit(AuditRequest(tmp_path / "r", AuditConfig(), csv=listing))
    with_model = EncoderChoice(checkpoint=tiny_checkpoint)
    with pytest.raises(UserError, match="--index audits the vectors it holds"):
        run_audit(AuditRequest(tmp_path / "r", AuditConfig(), index=tmp_path, encoder=with_model))
