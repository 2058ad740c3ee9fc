"""`retrieval evaluate` on the command line: it prints the text of the report `run_evaluation` makes, writes its
record as `--json`, and refuses what cannot apply in one line (exit code 2).

The evaluation itself is tested as a library call (`tests/evaluate/test_run.py`, `tests/evaluate/test_analysis.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval.cli.main import main
from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from tests.evaluate.checkpoints import write_digits_checkpoint

_DATA = ("data.val_fraction=0", "data.num_workers=0", "train.threads=1")


def _overrides(csv_dataset: Path) -> tuple[str, ...]:
    return (f"data.path={csv_dataset}", *_DATA)


def test_the_report_is_what_the_command_prints_and_writes(tiny_checkpoint, csv_dataset, tmp_path, capsys):
    report = run_evaluation(EvaluationRequest(checkpoint=tiny_checkpoint, overrides=_overrides(csv_dataset)))
    assert 0 <= report.metrics["recall@1"] <= 1 and report.record().uncertainty == report.uncertainty
    assert report.text().splitlines()[-1].startswith("MAP@R: ") and report.leak_warning is None
    settings = [argument for setting in _overrides(csv_dataset) for argument in ("--set", setting)]
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), *settings]) == 0
    assert capsys.readouterr().out.strip() == report.text()


@pytest.fixture(scope="module")
def proxy_checkpoint(tmp_path_factory):
    return write_digits_checkpoint(tmp_path_factory.mktemp("checkpoint") / "best.pt", "anchor")


def test_calibrate_without_a_validation_split_says_how_to_add_one(proxy_checkpoint, capsys):
    args = ["evaluate", "--checkpoint", str(proxy_checkpoint), "--calibrate", "--set", "data.val_fraction=0"]
    assert main(args) == 2
    assert "set data.val_fraction" in capsys.readouterr().err


def test_classification_needs_proxies(tmp_path, capsys):
    checkpoint = write_digits_checkpoint(tmp_path / "triplet.pt", "triplet")
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--classification", str(tmp_path / "out")]) == 2
    assert "needs a checkpoint trained with a proxy loss" in capsys.readouterr().err


def test_rerank_parameters_are_chosen_on_validation_and_recorded(proxy_checkpoint, tmp_path, capsys):
    checkpoint = proxy_checkpoint
    result = tmp_path / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--rerank", "qe", "--json", str(result)]) == 0
    out = capsys.readouterr().out
    chosen = json.loads(result.read_text())["rerank"]
    assert chosen["chosen_on"] == "validation" and chosen["spec"].startswith("qe:k=")
    assert f"re-ranking: {chosen['spec']} (chosen on validation: MAP@R {chosen['validation']['map@r']:.4f}" in out
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--rerank", "mqe"]) == 2
    assert "unknown re-ranking method 'mqe'" in capsys.readouterr().err
