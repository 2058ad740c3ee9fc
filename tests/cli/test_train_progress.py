"""`retrieval train` says what it is doing as each stage starts, beats inside epochs without a terminal,
and says so when asked to resume a run that is already complete."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from retrieval.cli.main import main
from retrieval.train import trainer

pytestmark = pytest.mark.slow


@pytest.fixture
def finished_run(one_epoch_digits_run) -> tuple[Path, str]:
    """A finished one-epoch run of the tiny demo and what it printed (conftest's, shared); tests resume copies of it."""
    return one_epoch_digits_run


def test_the_first_lines_say_which_stage_the_run_is_in(finished_run) -> None:
    _, out = finished_run
    lines = out.splitlines()
    assert lines[:4] == [
        "retrieval train: loading PyTorch and timm ...",
        "retrieval train: building the model (resnet10t) ...",
        "retrieval train: reading the data (digits) ...",
        "retrieval train: training epochs 1-1 of 1 on cpu, 5 batches each ...",
    ]
    assert lines[4].startswith("epoch 1/1  loss ")
    assert "retrieval train: scoring the selected checkpoint on the test split ..." in lines
    assert lines[-5].startswith("Recall@1: ") and lines[-1].startswith("MAP@R: ")  # the closing lines stay last


def test_resuming_a_finished_run_says_it_was_complete_before_its_result(finished_run, tmp_path, capsys) -> None:
    run = Path(shutil.copytree(finished_run[0], tmp_path / "run"))
    assert main(["train", "--resume", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "retrieval train: run already complete (epoch 1 of 1): scoring its selected checkpoint again ..." in lines
    complete = lines.index("run already complete (epoch 1 of 1); its result:")
    assert lines[complete + 1].startswith("run directory: ")
    assert lines[-5:] == finished_run[1].splitlines()[-5:]
    assert not any(line.startswith("retrieval train: training epochs") for line in lines)


def test_an_epoch_without_a_terminal_prints_progress_lines(finished_run, tmp_path, capsys, monkeypatch) -> None:
    run = Path(shutil.copytree(finished_run[0], tmp_path / "run"))
    monkeypatch.setattr(trainer, "HEARTBEAT_SECONDS", 0.0)  # pytest's stderr is no terminal: no tqdm bar
    assert main(["train", "--resume", str(run), "--set", "train.epochs=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "retrieval train: training epochs 2-2 of 2 on cpu, 5 batches each ..." in lines
    beats = [line for line in lines if line.startswith("retrieval train: epoch 2/2: batch ")]
    assert [beat.split(",")[0] for beat in beats] == [
        f"retrieval train: epoch 2/2: batch {i}/5 ({i * 20}%)" for i in range(1, 6)
    ]
    assert not any("run already complete" in line for line in lines)
