"""Writing an audit's report folder: one CSV per section, `summary.json` and `index.html`.

The folder is written beside its place and swapped in whole (`retrieval.runtime.directories`), so a
killed audit leaves the previous report or the new one, and a re-run never leaves an earlier run's
CSV beside the new ones. `--out` may name a new or empty folder or an earlier report (replaced);
anything else is refused before any work (`check_report_folder`), since replacing it would delete
what is there. A section that cannot exist for this catalogue (no labels: no label issues; no split
column: no leaks) writes no CSV, and the summary's `left_out` says why, once.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retrieval.audit.page import render_page
from retrieval.audit.tables import SECTIONS, Row, report_tables
from retrieval.errors import UserError
from retrieval.runtime.directories import refuse_file_in_the_way, staging_directory, swap_in
from retrieval.runtime.files import write_text

if TYPE_CHECKING:  # the findings module loads cleanlab and scikit-learn: not for `check_report_folder`
    from retrieval.audit.findings import AuditSummary, Findings

__all__ = ["REPORT_FILES", "check_report_folder", "write_report"]

REPORT_FILES = frozenset({*(f"{section.name}.csv" for section in SECTIONS), "summary.json", "index.html"})


def write_report(
    findings: Findings, embeddings: np.ndarray, out_dir: str | Path, limit: int = 50, title: str = "audit"
) -> AuditSummary:
    """Write the report folder (made, or an earlier report replaced as a whole); returns the summary it wrote.

    Raises:
        UserError: `out_dir` is refused by `check_report_folder`, or cannot be written.
    """
    out_dir = Path(out_dir).absolute()
    check_report_folder(out_dir)
    tables = report_tables(findings, embeddings)
    summary = findings.summary()
    files = {
        f"{section.name}.csv": _csv_text(section.columns, tables[section.name])
        for section in SECTIONS
        if section.name in tables
    }
    files["summary.json"] = json.dumps(summary.model_dump(), indent=2) + "\n"
    files["index.html"] = render_page(tables, summary, limit, title)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = staging_directory(out_dir)
        try:
            for name, text in files.items():
                write_text(staging / name, text)
            swap_in(staging, out_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # the new files on failure, the earlier report on success
    except OSError as exc:
        reason = exc.strerror or exc
        raise UserError(f"cannot write the report to {out_dir}: {reason}; choose a writable --out") from exc
    return summary


def check_report_folder(out_dir: Path) -> None:
    """Refuse, before any work, a report folder that is a file, lies under one, or holds anything but a report.

    Raises:
        UserError: saying which, and what to name instead.
    """
    refuse_file_in_the_way(out_dir, f"report folder {out_dir}")
    names = {entry.name for entry in out_dir.iterdir()} if out_dir.is_dir() else set()
    if names and ("summary.json" not in names or not names <= REPORT_FILES):
        other = sorted(names - REPORT_FILES) or ["no summary.json"]
        raise UserError(
            f"report folder {out_dir} is not an earlier audit report (it holds {other[0]!r}); name a new or empty "
            "folder, or an earlier report to replace"
        )


def _csv_text(columns: tuple[str, ...], rows: list[Row]) -> str:
    """The section's CSV: a header of `columns`, then each row's cells in that order.

    RFC 4180's CRLF line ends: Python's writer (before 3.12) quotes a cell holding a line break only when the
    break is in its line terminator, and a file name may hold a lone carriage return.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    writer.writerows([row.cell(column) for column in columns] for row in rows)
    return buffer.getvalue()
