"""`retrieval evaluate --backbone` and `retrieval index build --backbone`: a timm model scored and indexed untrained."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import timm
import torch

from retrieval.cli.main import main
from retrieval.config import load_config

NO_WORKERS = ["--num-workers", "0"]


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory) -> Path:
    """resnet18's weights (as in tests/models/test_backbone_weights.py): resnet10t's layer names mostly, but its stem
    and block counts differ."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet18.pth"
    torch.save(timm.create_model("resnet18").state_dict(), path)
    return path


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet10t.pth"
    torch.save(timm.create_model("resnet10t").state_dict(), path)
    return path


def _data_overrides(csv_path: Path) -> list[str]:
    settings = [
        "data.name=csv",
        f"data.path={csv_path}",
        "data.image_size=32",
        "data.val_fraction=0",
        "train.threads=1",
    ]
    return [argument for setting in settings for argument in ("--set", setting)]


def test_evaluate_a_backbone_prints_recall_lines(weights: Path, csv_dataset: Path, capsys) -> None:
    code = main(["evaluate", "--backbone", "resnet10t", "--weights", str(weights), *_data_overrides(csv_dataset)])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert re.fullmatch(r"Recall@1: \d\.\d{4}", out[-5]) and re.fullmatch(r"MAP@R: \d\.\d{4}", out[-1])
    assert any(line.startswith("95% CI (class bootstrap") for line in out)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("resnet18", "model.weights {path} does not fit resnet10t: 44 of 70 model tensors matched"),
        ("junk", "cannot read model.weights {path}"),
    ],
)
def test_weights_that_do_not_fit_are_one_line(
    content: str, message: str, tmp_path: Path, csv_dataset: Path, capsys
) -> None:
    path = tmp_path / "weights.pth"
    if content == "junk":
        path.write_bytes(b"not a state dict")
    else:
        torch.save(timm.create_model(content).state_dict(), path)
    code = main(["evaluate", "--backbone", "resnet10t", "--weights", str(path), *_data_overrides(csv_dataset)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: " + message.format(path=path))


def test_weights_without_a_backbone_are_refused(tiny_checkpoint: Path, csv_dataset: Path, capsys) -> None:
    code = main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--weights", str(tiny_checkpoint)])
    assert code == 2 and "--weights gives the weights of --backbone" in capsys.readouterr().err


def test_index_build_with_a_backbone_then_query(weights: Path, csv_dataset: Path, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    build = ["index", "build", "--backbone", "resnet10t", "--weights", str(weights), "--csv", str(csv_dataset)]
    assert main([*build, "--out", str(index), "--set", "data.image_size=32", *NO_WORKERS]) == 0
    assert "vectors: 28 of 28 images" in capsys.readouterr().out
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["dimension"] == 512 and manifest["model"]["backbone_config"]["model"]["weights"] == str(weights)

    image = csv_dataset.parent / "images" / "test_100_0.png"
    query = ["index", "query", "--index", str(index), "--image", str(image), "-k", "3", "--json", *NO_WORKERS]
    assert main(query) == 0
    (answer,) = json.loads(capsys.readouterr().out)
    assert answer["results"][0]["path"] == str(image)
    assert answer["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)


def test_index_build_from_a_checkpoint_refuses_backbone_options(tiny_checkpoint: Path, csv_dataset: Path, capsys):
    build = ["index", "build", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_dataset)]
    code = main([*build, "--out", "unused", "--set", "data.image_size=32"])
    assert code == 2 and "--weights, --config and --set describe a --backbone" in capsys.readouterr().err


def test_the_config_key_reaches_the_model(resnet18_file, csv_dataset, capsys, caplog):
    """`--set model.weights_partial=true` with `evaluate --backbone --weights`; without it, a one-line refusal."""
    config = load_config(None, ["model.weights_partial=true"])
    assert config.model.weights_partial is True
    data = ["--set", "data.name=csv", "--set", f"data.path={csv_dataset}", "--set", "data.image_size=32"]
    evaluate = ["evaluate", "--backbone", "resnet10t", "--weights", str(resnet18_file), *data]
    assert main(evaluate) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "set model.weights_partial=true to load the 44 that match" in err[0]
    assert main([*evaluate, "--set", "model.weights_partial=true", "--set", "data.val_fraction=0"]) == 0
    assert "partial load" in caplog.text and capsys.readouterr().out.strip().splitlines()[-1].startswith("MAP@R: ")
