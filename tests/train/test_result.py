"""`RunResult`: result.json written and read back exactly; a damaged file is one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.evaluate.uncertainty import QueryValues, uncertainty_summary
from retrieval.train.result import RunResult


def _result() -> RunResult:
    values = QueryValues(np.arange(8), np.repeat(np.arange(4), 2), {"recall@1": np.ones(8), "map@r": np.full(8, 0.5)})
    return RunResult(
        epoch=3,
        selected_on="val",
        test={"recall@1": 1.0, "map@r": 0.5},
        selection_value=0.75,
        uncertainty=uncertainty_summary(values),
    )


def test_written_result_reads_back_equal_with_the_file_spelling(tmp_path: Path) -> None:
    result = _result()
    result.write(tmp_path)
    stored = json.loads((tmp_path / "result.json").read_text())
    assert stored["uncertainty"]["recall@1"] == [1.0, 1.0, 1.0]
    assert stored["uncertainty"]["map@r"] == [0.5, 0.5, 0.5]
    assert RunResult.read(tmp_path) == result


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"selected_on": "best"}, "result.json.selected_on must be one of val, test, last, got 'best'"),
        ({"epoch": "three"}, "result.json.epoch must be int, got 'three'"),
        ({"surprise": 1}, "unknown key"),
    ],
)
def test_a_damaged_result_is_one_line_naming_the_field(tmp_path: Path, edit: dict[str, object], message: str) -> None:
    _result().write(tmp_path)
    stored = json.loads((tmp_path / "result.json").read_text())
    (tmp_path / "result.json").write_text(json.dumps({**stored, **edit}))
    with pytest.raises(UserError, match="^[^\n]*$") as caught:
        RunResult.read(tmp_path)
    assert message in str(caught.value)


def test_an_unfinished_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="did not finish"):
        RunResult.read(tmp_path)
    (tmp_path / "result.json").write_text('{"epoch": 1,')
    with pytest.raises(UserError, match="not valid JSON"):
        RunResult.read(tmp_path)
