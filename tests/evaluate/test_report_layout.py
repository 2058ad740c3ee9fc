"""`evaluate --json` and `classification.json`: typed records whose JSON is key for key the layout the files have held.

`data/evaluate_report.json` holds both files as the dict-built report wrote them (commit d125815) for a
fixed model and data; the typed records must write the same keys, in the same order, with the same values.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from retrieval.evaluate.run import EvaluationRequest, run_evaluation
from tests.evaluate.checkpoints import write_digits_checkpoint

_GOLDEN = Path(__file__).parent / "data" / "evaluate_report.json"


def _same(written: Any, expected: Any, where: str = "") -> None:
    """Equal key for key (order included); floats to 1e-4 relative: the golden's CPU and another CPU model train
    the digits model through other float kernels (an AMD EPYC differs by up to 2.7e-5 relative, in a false
    non-match rate, and 2.5e-6 in MAP@R), while a key, an order or a type that changed differs wholly."""
    if isinstance(expected, dict):
        assert isinstance(written, dict) and list(written) == list(expected), where
        for key, value in expected.items():
            _same(written[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(written, list) and len(written) == len(expected), where
        for index, (got, value) in enumerate(zip(written, expected, strict=True)):
            _same(got, value, f"{where}[{index}]")
    elif isinstance(expected, float) and not isinstance(written, bool):
        assert isinstance(written, float) and (
            (math.isnan(expected) and math.isnan(written)) or written == pytest.approx(expected, rel=1e-4, abs=1e-9)
        ), where
    else:
        assert type(written) is type(expected) and written == expected, where


def written_files(tmp_path: Path) -> dict[str, Any]:
    """The `--json` record and `classification.json` of one evaluation with every option that adds to them: what
    `evaluate --rerank qe:k=2,alpha=3 --calibrate --classification DIR --save-threshold 0.01 --json FILE` runs and
    writes (`--json` is the report's `record().json_text()`)."""
    checkpoint = write_digits_checkpoint(tmp_path / "best.pt", "anchor")
    out = tmp_path / "classification"
    request = EvaluationRequest(
        checkpoint, rerank="qe:k=2,alpha=3", calibrate=True, classification=out, save_threshold=0.01
    )
    report = json.loads(run_evaluation(request).record().json_text())
    report["classification"]["directory"] = "classification"  # the tmp folder's name differs from run to run
    return {"evaluate": report, "classification": json.loads((out / "classification.json").read_text())}


@pytest.mark.slow
def test_the_written_report_keeps_its_layout(tmp_path):
    _same(written_files(tmp_path), json.loads(_GOLDEN.read_text()))
