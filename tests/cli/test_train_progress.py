"""`retrieval train` says what it is doing as each stage starts, as `retrieval train: ...` lines before its epochs.

What a resume says (a complete run, the beats of an epoch without a terminal) is tested without the command
line, in `tests/train/test_resume.py`."""

from __future__ import annotations

import pytest

from retrieval.cli.main import main
from tests.conftest import TINY_BACKBONE, TINY_DIGITS

pytestmark = pytest.mark.slow


def test_the_first_lines_say_which_stage_the_run_is_in(tmp_path, capsys) -> None:
    """What the command prints, progress lines included, for the one-epoch run of `one_epoch_digits_run`."""
    overrides = [*TINY_DIGITS, "data.batch_size=128", "train.epochs=1"]
    assert main(["train", *(f"--set={o}" for o in overrides), "--output-dir", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        "retrieval train: loading PyTorch and timm ...",
        f"retrieval train: building the model ({TINY_BACKBONE}) ...",
        "retrieval train: reading the data (digits) ...",
        "retrieval train: training epochs 1-1 of 1 on cpu, 5 batches each ...",
    ]
    assert lines[4].startswith("epoch 1/1  loss ")
    assert "retrieval train: scoring the selected checkpoint on the test split ..." in lines
    assert lines[-5].startswith("Recall@1: ") and lines[-1].startswith("MAP@R: ")  # the closing lines stay last
