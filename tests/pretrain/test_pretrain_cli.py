"""`retrieval pretrain`: writes a backbone file `train --set model.weights=` loads, resumes exactly, refuses misuse."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from retrieval.cli.main import main
from retrieval.models.embedder import create_backbone

TINY = [
    "model.backbone=resnet10t",
    "model.pooling=avg",
    "data.image_size=16",
    "data.num_workers=0",
    "train.threads=1",
    "train.device=cpu",
    "pretrain.batch_size=8",
    "pretrain.hidden_dim=32",
    "pretrain.projection_dim=16",
]


def _sets(overrides: list[str]) -> list[str]:
    return [item for override in overrides for item in ("--set", override)]


def _pretrain(csv: Path, run: Path, *overrides: str) -> int:
    return main(["pretrain", "--csv", str(csv), *_sets([*TINY, *overrides]), "--output-dir", str(run)])


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simclr", "simsiam"])
def test_pretrained_backbone_loads_into_train_whole_and_says_the_head_starts_fresh(
    method, csv_dataset, tmp_path, capsys, caplog
):
    run = tmp_path / "pre"
    assert _pretrain(csv_dataset, run, "pretrain.epochs=2", f"pretrain.method={method}") == 0
    out = capsys.readouterr().out
    weights = run / "backbone.safetensors"
    assert f"backbone weights: {weights}" in out and "next: retrieval train" in out
    assert [record["epoch"] for record in _records(run)] == [1, 2]
    trained = load_file(weights)
    fresh = create_backbone("resnet10t").state_dict()
    assert trained.keys() == fresh.keys()
    assert any(not torch.equal(trained[key], fresh[key]) for key in trained if key.endswith("weight"))
    with caplog.at_level(logging.INFO, logger="retrieval"):
        loaded = create_backbone("resnet10t", weights=weights).state_dict()
    assert all(torch.equal(loaded[key], trained[key]) for key in trained)
    assert "the head and proxies start fresh" in caplog.text


@pytest.mark.slow
def test_resume_continues_exactly_where_an_uninterrupted_run_would_be(csv_dataset, tmp_path, capsys):
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert _pretrain(csv_dataset, straight, "pretrain.epochs=2") == 0
    assert _pretrain(csv_dataset, interrupted, "pretrain.epochs=1") == 0
    assert main(["pretrain", "--resume", str(interrupted), "--set", "pretrain.epochs=2"]) == 0
    assert [r["loss"] for r in _records(interrupted)] == [r["loss"] for r in _records(straight)]
    resumed, expected = load_file(interrupted / "backbone.safetensors"), load_file(straight / "backbone.safetensors")
    assert all(torch.equal(resumed[key], expected[key]) for key in expected)
    # Another head than the run's cannot take its weights: one line, not torch's key listing.
    assert main(["pretrain", "--resume", str(interrupted), "--set", "pretrain.hidden_dim=64"]) == 2
    assert "cannot resume: the checkpoint's model state does not fit" in capsys.readouterr().err


@pytest.mark.slow
def test_bf16_autocast_pretrains_on_the_cpu(csv_dataset, tmp_path):
    assert _pretrain(csv_dataset, tmp_path / "bf16", "pretrain.epochs=1", "train.amp=bf16") == 0
    assert torch.isfinite(torch.tensor(_records(tmp_path / "bf16")[0]["loss"]))


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


@pytest.mark.slow
def test_two_torchrun_processes_pretrain_one_run_and_print_once(csv_dataset, tmp_path):
    run = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "retrieval"]
    arguments = ["pretrain", "--csv", str(csv_dataset), *_sets([*TINY, "pretrain.epochs=1"]), "--output-dir", str(run)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([*command, *arguments], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("backbone weights: ") == 1 and done.stdout.count("epoch 1/1 ") == 1
    assert json.loads((run / "environment.json").read_text())["world_size"] == 2
    assert load_file(run / "backbone.safetensors")
