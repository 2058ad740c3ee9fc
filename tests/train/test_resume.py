"""Resuming a training run, without the command line: `last.pt` paired with the `best.pt` beside it, a finished
run detected and scored again, and an interrupted run continued exactly where an uninterrupted one would be."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import timm
import torch

from retrieval.errors import UserError
from retrieval.runtime import heartbeat
from retrieval.train import trainer
from retrieval.train.resume import resume_point
from retrieval.train.runs import TrainRequest, check_training_request, resumed_checkpoint
from tests.conftest import TINY_BACKBONE, TINY_DEMO, TINY_DIGITS, write_csv_config
from tests.train.training import FINAL_LINES, train, train_interrupted


@pytest.fixture
def finished_run(one_epoch_digits_run, tmp_path) -> tuple[Path, str]:
    """A copy of conftest's finished one-epoch run of the tiny demo, and what it printed."""
    run, out = one_epoch_digits_run
    return Path(shutil.copytree(run, tmp_path / "run")), out


def test_a_run_directory_resumes_its_last_pt_paired_with_the_best_pt_beside_it(finished_run):
    run, _ = finished_run
    last = resumed_checkpoint(run)
    assert last == run / "checkpoints" / "last.pt" and resumed_checkpoint(last) == last
    point = resume_point(last)
    assert point.last.resumable and point.best is not None and not point.best.resumable
    assert point.best.epoch == point.last.best_epoch - 1 and point.run_dir == run.resolve()
    (run / "checkpoints" / "best.pt").unlink()  # a run interrupted before its first selection
    assert resume_point(last).best is None


def test_a_run_whose_last_epoch_is_trained_is_complete_until_more_epochs_are_asked(finished_run):
    last = resumed_checkpoint(finished_run[0])
    assert resume_point(last).complete == "run already complete (epoch 1 of 1)"
    assert resume_point(last, overrides=["train.epochs=2"]).complete is None


def test_a_missing_checkpoint_to_resume_is_refused_before_pytorch_loads(tmp_path):
    with pytest.raises(UserError, match="checkpoint not found: missing-run; pass a run's checkpoints/best.pt"):
        check_training_request(TrainRequest(resume=Path("missing-run")))
    with pytest.raises(UserError, match="--seeds and --resume cannot be combined"):
        TrainRequest(resume=tmp_path, seeds=(0, 1))


@pytest.mark.slow
def test_a_best_pt_holds_no_optimizer_state_to_resume_from(finished_run):
    """Was the end of `test_best_holds_what_evaluation_needs_and_last_what_resume_needs` (test_train_knobs.py)."""
    with pytest.raises(UserError, match=r"no optimizer state\); resume from the run directory or its checkpoints/last"):
        train(resume=finished_run[0] / "checkpoints" / "best.pt")


@pytest.mark.slow
def test_resuming_a_finished_run_says_it_was_complete_before_its_result(finished_run, caplog):
    """Was `tests/cli/test_train_progress.py`'s test of the same name: the lines `retrieval train` prints."""
    run, out = finished_run
    with caplog.at_level(logging.INFO, logger="retrieval"):
        _, said = train(resume=run)
    lines = said.splitlines()
    messages = [record.getMessage() for record in caplog.records]
    assert "run already complete (epoch 1 of 1): scoring its selected checkpoint again ..." in messages
    complete = lines.index("run already complete (epoch 1 of 1); its result:")
    assert lines[complete + 1].startswith("run directory: ")
    assert lines[-5:] == out.splitlines()[-5:]
    assert not any(message.startswith("training epochs") for message in messages)


@pytest.mark.slow
def test_an_epoch_without_a_terminal_logs_progress_lines(finished_run, caplog, monkeypatch):
    """Was `test_an_epoch_without_a_terminal_prints_progress_lines` (tests/cli/test_train_progress.py): the messages
    `retrieval train` prints as `retrieval train: MESSAGE` lines."""
    monkeypatch.setattr(heartbeat, "HEARTBEAT_SECONDS", 0.0)  # pytest's stderr is no terminal: no tqdm bar
    with caplog.at_level(logging.INFO, logger="retrieval"):
        _, said = train(["train.epochs=2"], resume=finished_run[0])
    messages = [record.getMessage() for record in caplog.records]
    assert "training epochs 2-2 of 2 on cpu, 5 batches each ..." in messages
    beats = [message for message in messages if message.startswith("epoch 2/2: batch ")]
    assert [beat.split(",")[0] for beat in beats] == [f"epoch 2/2: batch {i}/5 ({i * 20}%)" for i in range(1, 6)]
    assert not any("run already complete" in line for line in [*messages, *said.splitlines()])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["demo", "pk_with_workers"])
def test_resume_continues_exactly(kind, request, tmp_path, csv_dataset, monkeypatch):
    """Was `tests/cli/test_cli.py`'s test of the same name (`main` returning 130 there: `KeyboardInterrupt` here)."""
    interrupted = tmp_path / "interrupted"
    config = None
    if kind == "demo":  # the uninterrupted run is conftest's tiny demo: the same request, trained once
        overrides = list(TINY_DEMO)
        straight = request.getfixturevalue("tiny_demo")[0]
    else:  # the PK sampler's plan and a worker process must replay the same batches too
        config = write_csv_config(tmp_path, csv_dataset, {"name": "circle"})
        overrides = ["data.p=2", "data.k=4", "data.num_workers=1", "train.epochs=2"]
        straight = tmp_path / "straight"
        train(overrides, straight, config=config)

    train_interrupted(monkeypatch, 1, overrides, interrupted, config)
    train(resume=interrupted)  # the run directory is enough

    a = torch.load(straight / "checkpoints/last.pt", weights_only=True)
    b = torch.load(interrupted / "checkpoints/last.pt", weights_only=True)
    assert a["epoch"] == b["epoch"] == 1
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=0, atol=0, msg=name)
    for name, tensor in a["loss"].items():  # proxies, for proxy losses
        torch.testing.assert_close(b["loss"][name], tensor, rtol=0, atol=0, msg=name)
    lines = (interrupted / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    assert (interrupted / "result.json").read_text() == (straight / "result.json").read_text()


@pytest.mark.slow
def test_resume_takes_the_weights_from_the_checkpoint_not_from_the_weights_file(tmp_path, monkeypatch):
    """Was `tests/cli/test_cli.py`'s test of the same name."""
    weights = tmp_path / "backbone.pth"
    torch.save(timm.create_model(TINY_BACKBONE, num_classes=0).state_dict(), weights)
    run = tmp_path / "run"
    overrides = [*TINY_DEMO, f"model.weights={weights}", "train.freeze_backbone_epochs=0"]
    train_interrupted(monkeypatch, 1, overrides, run)
    weights.unlink()  # offline and without the file: resuming must not need it
    _, said = train(resume=run / "checkpoints" / "last.pt")
    assert FINAL_LINES.search(said)


@pytest.mark.slow
@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_curves_are_redrawn_during_training_at_most_once_a_minute(every, csv_dataset, tmp_path, monkeypatch):
    """A long run's plots/curves.png follows its epochs (an interrupted run keeps one); a short run draws it at the end
    only, as a redraw costs more than its epochs."""
    monkeypatch.setattr(trainer, "CURVES_EVERY", every)
    tiny = [*TINY_DIGITS, "train.epochs=3", "train.plots=true"]
    data = ["data.name=csv", f"data.path={csv_dataset}", "data.val_fraction=0.5", "data.batch_size=4"]
    run = tmp_path / "run"
    train_interrupted(monkeypatch, 2, [*tiny, *data], run)
    assert (run / "plots" / "curves.png").exists() == (every == 0.0)


@pytest.mark.slow
def test_a_run_without_plots_draws_no_figure_while_training_or_at_the_end(csv_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "CURVES_EVERY", 0.0)  # a redraw every epoch, were plots on
    data = ["data.name=csv", f"data.path={csv_dataset}", "data.val_fraction=0.5", "data.batch_size=4"]
    train([*TINY_DIGITS, "train.epochs=2", "train.plots=false", *data], tmp_path / "run")
    assert (tmp_path / "run" / "result.json").is_file() and not list((tmp_path / "run").rglob("*.png"))
