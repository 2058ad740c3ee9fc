"""Where a report may be written: a foreign folder is refused and left as it was, an earlier report replaced.

`audit --out` naming a file, refused in one line before any work, is the command's: `tests/cli/test_audit_cli.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.audit.catalogue import Catalogue
from retrieval.audit.findings import audit_embeddings
from retrieval.audit.report import write_report
from retrieval.config import AuditConfig
from retrieval.errors import UserError


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
