"""`retrieval train`'s runs without the command line: one run a seed in `seed-N`, each said as it ends, then the
summary over seeds; and the request's checks before PyTorch loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from retrieval.errors import UserError
from retrieval.train.runs import TrainRequest, check_training_request, seed_run_dir
from tests.conftest import TINY_DIGITS
from tests.train.training import FINAL_LINES, train

TINY = [*TINY_DIGITS, "data.batch_size=128"]


@pytest.mark.slow
def test_seeds_print_mean_and_spread(tmp_path):
    """Was `tests/train/test_trainer.py`'s test of the same name, through `main`."""
    report, said = train([*TINY, "train.epochs=1"], tmp_path / "runs", seeds=[0, 1])
    assert "over 2 seeds (0, 1), mean ± sd of the test metrics:" in said
    assert re.search(r"^MAP@R: \d\.\d{4} ± \d\.\d{4}$", said, re.M)
    results = [json.loads((tmp_path / "runs" / f"seed-{s}" / "result.json").read_text()) for s in (0, 1)]
    assert results[0]["test"] != results[1]["test"]
    # Each seed's run is said as it ends, headed by its seed, in its own directory.
    assert [(run.seed, run.run_dir) for run in report.runs] == [(s, tmp_path / "runs" / f"seed-{s}") for s in (0, 1)]
    first, second = said.split("seed 1\n")
    assert first.startswith("seed 0\n") and FINAL_LINES.search(first)
    assert "over 2 seeds" not in first
    assert [run.result.test for run in report.runs] == [result["test"] for result in results]


def test_a_seeds_run_directory_is_seed_n_inside_the_output_folder():
    assert seed_run_dir(Path("runs/demo"), 3) == Path("runs/demo/seed-3")


@pytest.mark.parametrize("seeds", [(1, 1), (-1,)])
def test_seeds_are_distinct_and_not_negative(seeds):
    with pytest.raises(ValueError, match="seeds must be distinct integers >= 0"):
        TrainRequest(seeds=seeds)


def test_a_request_is_checked_before_pytorch_loads(tmp_path):
    (tmp_path / "taken").write_text("mine")
    with pytest.raises(UserError, match="--output-dir .*taken is a file"):
        check_training_request(TrainRequest(output_dir=tmp_path / "taken"))
    with pytest.raises(UserError, match="unknown loss.name 'anchr'"):
        check_training_request(TrainRequest(overrides=("loss.name=anchr",)))
    missing = tmp_path / "missing.csv"
    with pytest.raises(UserError, match=f"dataset CSV not found: {missing}"):
        check_training_request(TrainRequest(overrides=("data.name=csv", f"data.path={missing}")))
