"""`retrieval pretrain` on the command line: misuse refused in one line, and under torchrun one run printed once.

What a run writes, and how it resumes, is tested without the command line in `tests/pretrain/test_pretrain_run.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

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
