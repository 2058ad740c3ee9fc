"""`retrieval train` on the command line: a setup the data cannot take is refused (exit code 2), naming the fix.

Training itself is tested through `run_training` (tests/train/training.py) in tests/train and tests/data; here,
what the command prints and its exit codes."""

from __future__ import annotations

import re

import pytest
import torch
import yaml

from retrieval.cli.main import main
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_BACKBONE, TINY_DIGITS
from tests.data.test_multi_label import make_multi_label, multi_label_config


@pytest.mark.parametrize(
    ("loss", "overrides", "message"),
    [
        ("proxy_nca", [], "is multi-label (labels joined by '|'): train it with loss.name=asymmetric_proxy"),
        ("asymmetric_proxy", ["--set", "data.val_fraction=0.2"], "is multi-label: data.val_classes/val_fraction"),
    ],
)
def test_multi_label_data_with_a_single_label_setup_is_a_user_error(
    tmp_path, csv_dataset, capsys, loss, overrides, message
):
    make_multi_label(csv_dataset)
    args = ["train", "--config", str(multi_label_config(tmp_path, csv_dataset, loss)), *overrides]
    assert main([*args, "--output-dir", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err


def test_a_tracker_other_than_tensorboard_and_mlflow_is_refused(capsys):
    """The printed refusal of `tests/train/test_trackers.py`'s check of `train.loggers`."""
    assert main(["train", "--set", "train.loggers=[wandb]"]) == 2
    assert "train.loggers must be a list of tensorboard and mlflow, or []" in capsys.readouterr().err


def test_a_non_finite_loss_is_one_line_and_overwrites_nothing(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    args = [
        "train",
        *[f"--set={o}" for o in [*TINY_DIGITS, "data.batch_size=128", "train.epochs=2"]],
        "--output-dir",
        str(run),
    ]
    original = Trainer._train_epoch
    monkeypatch.setattr(
        Trainer, "_train_epoch", lambda self, epoch: original(self, epoch) if epoch == 0 else self._poisoned(epoch)
    )

    def poisoned(self, epoch):
        self.parts.loss.forward = lambda embeddings, labels: embeddings.sum() * float("nan")
        return original(self, epoch)

    monkeypatch.setattr(Trainer, "_poisoned", poisoned, raising=False)
    assert main(args) == 2
    line = capsys.readouterr().err.strip()
    assert re.fullmatch(r"error: the loss became nan at epoch 2, step 1; nothing saved was overwritten .*", line)
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=True)["epoch"] == 0


@pytest.mark.slow
def test_the_demo_trains_a_pair_loss_without_setting_p(tmp_path, capsys):
    # The demo's data and sampler; a 16 px `TINY_BACKBONE` on one thread: the fitted P is what is checked, not recall.
    tiny = [f"model.backbone={TINY_BACKBONE}", "data.image_size=16", "train.threads=1", "train.plots=false"]
    sets = [item for override in ["loss.name=supcon", "train.epochs=1", *tiny] for item in ("--set", override)]
    args = ["train", *sets, "--output-dir", str(tmp_path / "run")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "retrieval train: data.p=10 classes per batch: the default 32 does not fit" in out
    assert re.search(r"^MAP@R: \d\.\d{4}$", out, re.M)
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["data"]["p"] == 10  # what resume reads
