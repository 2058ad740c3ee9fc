"""`RunResult`: what a finished run reports, the record `result.json` holds, read back strictly.

The trainer writes it; `retrieval sweep` and `retrieval train --seeds` read it back. A hand-edited or
truncated file is refused naming the field, never a `KeyError` in a sweep's report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from retrieval.errors import UserError
from retrieval.evaluate.uncertainty import Uncertainty
from retrieval.runtime.files import write_text
from retrieval.validation import user_error

__all__ = ["RESULT_FILE", "RunResult"]

RESULT_FILE = "result.json"


class RunResult(BaseModel):
    """The selected checkpoint of a run and its test metrics (scored once)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch: int  # the selected epoch (1-based)
    selected_on: Literal["val", "test", "last"]  # "test" is the optimistic opt-in; "last": no validation split
    test: dict[str, float]  # Recall@K, MAP@R, R-precision of the selected checkpoint on the test set
    selection_value: float | None = None  # the selection metric's value at that epoch
    uncertainty: Uncertainty | None = None  # test Recall@1 / MAP@R with 95% class-bootstrap intervals
    selected_weights: Literal["raw", "ema"] = "raw"  # the trained weights or their average (train.ema)

    @property
    def label(self) -> str:
        """The tag every printed test figure carries when the checkpoint was chosen on the test set."""
        return "selected on test" if self.selected_on == "test" else ""

    def describe(self, metric: str) -> str:
        """One line saying which checkpoint the test figures belong to and why."""
        weights = " (EMA weights)" if self.selected_weights == "ema" else ""
        if self.selected_on == "last":
            return f"result: last epoch ({self.epoch}); no validation split, so nothing was selected{weights}"
        where = "validation set" if self.selected_on == "val" else "TEST set (train.select_on_test; optimistic)"
        return f"result: epoch {self.epoch}, best {metric} {self.selection_value:.4f} on the {where}{weights}"

    def write(self, run_dir: Path) -> None:
        """Write `run_dir/result.json`, atomically."""
        write_text(Path(run_dir) / RESULT_FILE, self.model_dump_json(indent=2, by_alias=True) + "\n")

    @classmethod
    def read(cls, run_dir: Path) -> RunResult:
        """The result of the run in `run_dir`.

        Raises:
            UserError: no `result.json` (the run did not finish), or a field that is missing or of the wrong type.
        """
        path = Path(run_dir) / RESULT_FILE
        if not path.is_file():
            raise UserError(f"{path} not found; the run did not finish (resume it with `retrieval train --resume`)")
        try:
            return cls.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise user_error(cls, exc, str(path), fix="run the training again or restore the file") from None
