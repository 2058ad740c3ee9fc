"""`retrieval data longtail` on the command line: its printed summary, and a refusal in one line (exit code 2).

The long-tail profile and its refusals as library calls are tests/data/test_longtail.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retrieval.cli.main import main
from retrieval.data.longtail import longtail_counts
from tests.data.test_longtail import read_rows, write_balanced_csv


def test_cli_writes_the_csv_and_refuses_in_one_line(tmp_path: Path, capsys) -> None:
    source = write_balanced_csv(tmp_path / "dataset.csv")
    out = tmp_path / "lt.csv"
    assert main(["data", "longtail", "--csv", str(source), "--out", str(out), "--imbalance", "10"]) == 0
    assert "10 training classes, 60 -> 6 images per class" in capsys.readouterr().out
    assert main(["data", "longtail", "--csv", str(source), "--out", str(out), "--imbalance", "100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --imbalance 100 gives the rarest classes 0 images")
    assert np.isclose(len(read_rows(out)), 9 + 12 + longtail_counts(10, 60, 10.0).sum())
