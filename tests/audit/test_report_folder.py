"""Where a report may be written: a file or a foreign folder is refused before any work, an earlier report replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.report import write_report
from retrieval.cli.main import main
from retrieval.config import AuditConfig
from retrieval.errors import UserError


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


def test_a_folder_holding_other_files_is_refused_and_left_as_it_was(planted, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "best.pt").write_text("weights")
    (folder / "summary.json").write_text("{}")  # a report's name among others is not a report
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    with pytest.raises(UserError, match="is not an earlier audit report \\(it holds 'best.pt'\\)"):
        write_report(findings, planted.embeddings, folder)
    assert sorted(path.name for path in folder.iterdir()) == ["best.pt", "summary.json"]


def test_an_earlier_report_is_replaced_whole_without_its_stale_sections(planted, tmp_path):
    out = tmp_path / "report"
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, out)
    assert (out / "label_issues.csv").is_file() and (out / "leaks.csv").is_file()
    unlabelled = Catalogue(planted.catalogue.paths)
    findings = audit_embeddings(planted.embeddings, unlabelled, AuditConfig(k=8, threshold=0.99), False)
    write_report(findings, planted.embeddings, out)
    names = sorted(path.name for path in out.iterdir())
    assert names == ["exact_duplicates.csv", "index.html", "near_duplicates.csv", "outliers.csv", "summary.json"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["images", "report"]  # no staging copy left beside


def test_an_empty_folder_takes_the_report(planted, tmp_path: Path):
    (tmp_path / "empty").mkdir()
    findings = audit_embeddings(planted.embeddings, planted.catalogue, AuditConfig(k=8), False)
    write_report(findings, planted.embeddings, tmp_path / "empty")
    assert (tmp_path / "empty" / "index.html").is_file()
