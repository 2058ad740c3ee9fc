"""Writing an audit's report folder: one CSV per section, `summary.json` and `index.html`.

Every file goes through `retrieval.runtime.files` (atomic), so a killed audit leaves no half file.
A section that cannot exist for this catalogue (no labels: no label issues; no split column: no
leaks) writes no CSV, and the summary's `left_out` says why, once.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from retrieval.audit.findings import AuditSummary, Findings
from retrieval.audit.page import render_page
from retrieval.audit.tables import SECTIONS, Row, report_tables
from retrieval.runtime.files import write_text

__all__ = ["write_report"]


def write_report(
    findings: Findings, embeddings: np.ndarray, out_dir: str | Path, limit: int = 50, title: str = "audit"
) -> AuditSummary:
    """Write the report folder (created if needed); returns the summary it wrote."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = report_tables(findings, embeddings)
    for section in SECTIONS:
        if section.name in tables:
            write_text(out_dir / f"{section.name}.csv", _csv_text(section.columns, tables[section.name]))
    summary = findings.summary()
    write_text(out_dir / "summary.json", json.dumps(summary.model_dump(), indent=2) + "\n")
    write_text(out_dir / "index.html", render_page(tables, summary, limit, title))
    return summary


def _csv_text(columns: tuple[str, ...], rows: list[Row]) -> str:
    """The section's CSV: a header of `columns`, then each row's cells in that order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([row.cell(column) for column in columns] for row in rows)
    return buffer.getvalue()
