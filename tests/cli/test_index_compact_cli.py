"""`retrieval index compact`: the line saying what it dropped, and a missing index as one error."""

from __future__ import annotations

from pathlib import Path

from retrieval.cli.main import main
from tests.index.index_oracle import N
from tests.index.test_compact import REMOVED, removed_and_saved


def test_the_command_says_what_it_dropped(data, tmp_path: Path, capsys) -> None:
    removed_and_saved("ivfpq", data, tmp_path / "gallery")
    assert main(["index", "compact", "--index", str(tmp_path / "gallery")]) == 0
    out = capsys.readouterr().out
    assert f"dropped {len(REMOVED)} removed vectors, {N - len(REMOVED)} remain; index.faiss " in out
    assert main(["index", "compact", "--index", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
