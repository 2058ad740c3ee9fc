"""`evaluate --checkpoint CKPT --set ...`: what can apply to trained weights applies, the rest is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.checkpoint import Checkpoint
from retrieval.cli.main import main
from retrieval.errors import UserError


def _data(csv_dataset: Path) -> list[str]:
    settings = [f"data.path={csv_dataset}", "data.val_fraction=0", "data.num_workers=0", "train.threads=1"]
    return [argument for setting in settings for argument in ("--set", setting)]


@pytest.mark.parametrize(
    "key", ["model.backbone=resnet18", "model.embedding_dim=32", "model.pooling=gem", "loss.scale=3"]
)
def test_a_key_training_fixed_is_refused_in_one_line(key, tiny_checkpoint, csv_dataset, capsys):
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), *_data(csv_dataset), "--set", key]) == 2
    name = key.partition("=")[0]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --set {name} cannot apply to a trained checkpoint: its model and loss are the ones it was trained "
        f"with (of them, only model.flip_average can be set); train a run with it instead: retrieval train --set "
        f"{name}=..."
    ]


def test_data_and_evaluation_keys_apply(tiny_checkpoint, csv_dataset, monkeypatch, capsys):
    built = []
    embedder = Checkpoint.embedder

    def spy(checkpoint: Checkpoint, *args, **kwargs):
        model = embedder(checkpoint, *args, **kwargs)
        built.append(model.flip_average)
        return model

    monkeypatch.setattr(Checkpoint, "embedder", spy)
    overrides = ["--set", "model.flip_average=true", "--set", "data.eval_batch_size=3"]
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), *_data(csv_dataset), *overrides]) == 0
    assert built == [True]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("MAP@R: ")


def test_a_config_file_replaces_data_but_not_the_trained_model(tiny_checkpoint, tmp_path):
    checkpoint = Checkpoint.read(tiny_checkpoint)
    path = tmp_path / "other.yaml"
    path.write_text(
        "model:\n  backbone: resnet50\n  flip_average: true\nloss:\n  name: circle\ndata:\n  image_size: 48\n"
    )
    config = checkpoint.config(path)
    assert config.model == checkpoint.model_config and config.loss.name == checkpoint.run_config["loss"]["name"]
    assert config.data.image_size == 48
    assert checkpoint.config(path, ["model.flip_average=true"]).model.flip_average is True
    with pytest.raises(UserError, match="--set model.in_chans cannot apply to a trained checkpoint"):
        checkpoint.config(path, ["model.in_chans=1"])


@pytest.mark.slow
def test_groups_of_classes_the_checkpoint_never_trained_on_say_so(tiny_checkpoint, capsys):
    """The tiny checkpoint's run config names no dataset; its frequency groups on the digits are the digits'."""
    digits = ["data.name=digits", "data.image_size=16", "data.num_workers=0", "train.threads=1"]
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), *(f"--set={item}" for item in digits)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("by training frequency")]
    assert line.endswith("; groups of this data's training split: the checkpoint trained on csv, not on these classes")
