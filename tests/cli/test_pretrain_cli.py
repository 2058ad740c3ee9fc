"""`retrieval pretrain` on the command line: misuse refused in one line.

What a run writes, and how it resumes, is tested without the command line in `tests/pretrain/test_pretrain_run.py`;
under torchrun, one run printed once, in `tests/train/test_distributed.py`'s launch."""

from __future__ import annotations

from pathlib import Path

from retrieval.cli.main import main
from tests.pretrain.pretraining import TINY


def _sets(overrides: list[str]) -> list[str]:
    return [item for override in overrides for item in ("--set", override)]


def _pretrain(csv: Path, run: Path, *overrides: str) -> int:
    return main(["pretrain", "--csv", str(csv), *_sets([*TINY, *overrides]), "--output-dir", str(run)])


def test_a_source_and_an_output_folder_are_required(capsys):
    assert main(["pretrain", "--output-dir", "x"]) == 2
    assert "needs --images DIR or --csv FILE" in capsys.readouterr().err


def test_resume_refuses_a_new_image_source_and_a_folder_that_is_no_pretraining_run(tmp_path, capsys):
    assert main(["pretrain", "--resume", str(tmp_path), "--images", str(tmp_path)]) == 2
    assert "leave out --images and --csv" in capsys.readouterr().err
    assert main(["pretrain", "--resume", str(tmp_path)]) == 2
    assert "no pretraining checkpoint" in capsys.readouterr().err


def test_a_bad_pretrain_key_is_one_line(csv_dataset, tmp_path, capsys):
    assert _pretrain(csv_dataset, tmp_path / "bad", "pretrain.method=byol") == 2
    err = capsys.readouterr().err
    assert "pretrain.method" in err and len(err.strip().splitlines()) == 1
