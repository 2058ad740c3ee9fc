"""`run_evaluation`: the evaluation of `retrieval evaluate` from Python, a typed request in, a typed report out.

That the command prints the report's text is `tests/cli/test_evaluate_cli.py`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.errors import UserError
from retrieval.evaluate.run import EvaluationRequest, run_evaluation

_DATA = ("data.val_fraction=0", "data.num_workers=0", "train.threads=1")


def _overrides(csv_dataset: Path) -> tuple[str, ...]:
    return (f"data.path={csv_dataset}", *_DATA)


def test_a_request_out_of_range_is_a_value_error_naming_the_range(tiny_checkpoint):
    with pytest.raises(ValueError, match="exactly one of checkpoint and backbone"):
        EvaluationRequest()
    with pytest.raises(ValueError, match="exactly one of checkpoint and backbone"):
        EvaluationRequest(checkpoint=tiny_checkpoint, backbone="resnet18")
    with pytest.raises(ValueError, match=r"calibration_share must lie in \(0, 1\]"):
        EvaluationRequest(checkpoint=tiny_checkpoint, calibration_share=0)
    with pytest.raises(ValueError, match=r"false match rate in \(0, 1\)"):
        EvaluationRequest(checkpoint=tiny_checkpoint, save_threshold=1.0)
    with pytest.raises(ValueError, match=r"leak_ratio must lie in \[0, 1\)"):
        EvaluationRequest(checkpoint=tiny_checkpoint, exclude_leaks=True, leak_ratio=1.0)
    with pytest.raises(ValueError, match="grid_queries must be one of"):
        EvaluationRequest(checkpoint=tiny_checkpoint, grid_queries="best")
    with pytest.raises(UserError, match="unknown re-ranking method 'rocchio'"):  # the user's spec, in their words
        EvaluationRequest(checkpoint=tiny_checkpoint, rerank="rocchio")


def test_a_request_that_cannot_apply_is_a_user_error(tiny_checkpoint, csv_dataset):
    request = EvaluationRequest(checkpoint=tiny_checkpoint, overrides=_overrides(csv_dataset), leak_ratio=0.4)
    with pytest.raises(UserError, match="add --exclude-leaks"):
        run_evaluation(request)
