"""`model.in_chans: 1` end to end through the command line: grayscale images, a 1-channel stem, evaluate."""

from __future__ import annotations

import re

import pytest
import torch
import yaml

from retrieval.cli.main import main

pytestmark = pytest.mark.slow


def test_grayscale_trains_and_evaluates_through_the_cli(tmp_path, csv_dataset, capsys):
    config = {
        "model": {"backbone": "resnet10t", "embedding_dim": 16, "pretrained": False, "in_chans": 1},
        "data": {"name": "csv", "path": str(csv_dataset), "image_size": 32, "batch_size": 8, "num_workers": 0},
        "augment": {"preset": "glyph"},
        "loss": {"name": "proxy_nca"},
        "train": {"epochs": 1, "freeze_backbone_epochs": 0, "freeze_bn": False, "device": "cpu", "plots": False},
    }
    path, run = tmp_path / "config.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(path), "--output-dir", str(run)]) == 0
    trained = capsys.readouterr().out.splitlines()[-5:]
    assert re.fullmatch(r"MAP@R: \d\.\d{4}", trained[-1])

    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["in_chans"] == 1 and saved["augment"]["preset"] == "glyph"
    assert saved["augment"]["eval_mode"] == "resize" and saved["augment"]["hflip"] == 0.0
    checkpoint = torch.load(run / "checkpoints/last.pt", weights_only=True)
    stem = next(tensor for name, tensor in checkpoint["model"].items() if tensor.ndim == 4)
    assert stem.shape[1] == 1  # timm built a 1-channel stem

    assert main(["evaluate", "--checkpoint", str(run / "checkpoints/last.pt")]) == 0
    assert capsys.readouterr().out.splitlines()[-5:] == trained
