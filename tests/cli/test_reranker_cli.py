"""`retrieval reranker` on the command line: data it cannot choose a blend on, and a folder that is not its own,
are refused (exit code 2).

What a re-ranker run writes is tested on `tiny_reranker` (`train_reranker`) in `tests/reranker/`."""

from __future__ import annotations

import pytest

from retrieval.cli.main import main

pytestmark = pytest.mark.slow


def test_data_without_validation_split_and_a_foreign_output_dir_are_refused(tiny_reranker, tmp_path, capsys):
    checkpoint, dataset, _, _ = tiny_reranker
    base = ["reranker", "--checkpoint", str(checkpoint), "--set", f"data.path={dataset}", "--set", "data.num_workers=0"]
    assert main([*base, "--output-dir", str(tmp_path / "r")]) == 2
    assert "chooses its blend on a validation split, and this data has none" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main([*base, "--set", "data.val_fraction=0.3", "--output-dir", str(tmp_path / "mine")]) == 2
    assert "is not a re-ranker directory" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
