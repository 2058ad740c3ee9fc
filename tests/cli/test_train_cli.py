"""`retrieval train` on the command line: a setup the data cannot take is refused (exit code 2), naming the fix.

Training itself is tested through `run_training` (tests/train/training.py) in tests/train and tests/data."""

from __future__ import annotations

import pytest

from retrieval.cli.main import main
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
