"""`MatchThreshold`: the score at or above which a query and an item are taken to match, and its provenance.

One record from end to end: `retrieval evaluate --save-threshold` makes it, the checkpoint and an
export's manifest carry it, `index build` copies it into the index manifest, and `index query` and
the search service read it for `min_score: stored` (`retrieval.index.min_score`). On disk it is the
JSON object `MatchThreshold.to_dict` gives. A top-level module: the checkpoint, inference, export
and index packages all hold one, and none of them may import another for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from retrieval.validation import Record, ValidationError, user_error

__all__ = ["MatchThreshold"]


class MatchThreshold(Record):
    """A model's stored match threshold: a pair matches at `score` or above, and how the score was chosen.

    Only `score` is required: the provenance fields are what `evaluate --save-threshold` records
    (`retrieval.evaluate.verification.threshold_record`). Keys a later toolkit adds are kept,
    not refused, so that its checkpoints and indexes still load here (older toolkits ignore the record).
    """

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    score: float  # a pair (query, item) matches when their cosine is >= score
    target_fmr: float | None = None  # the false match rate it was chosen for
    chosen_on: Literal["val", "test"] | None = None  # the split it was chosen on (test only when opted in)
    selection_fnmr: float | None = None  # the false non-match rate on that split
    test_fmr: float | None = None  # the rates the test split gave at `score`
    test_fnmr: float | None = None
    dataset: str | None = None  # the `data.name` it was measured on

    @classmethod
    def read(cls, value: Any, where: str, fix: str) -> MatchThreshold | None:
        """The threshold stored as `value` (None when none is), read from `where`.

        Raises:
            UserError: one line naming the field that is missing or of the wrong type, then `fix`.
        """
        if value is None:
            return None
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise user_error(cls, exc, where, fix) from None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data, with exactly the keys it was made from (as it is written to disk)."""
        return self.model_dump(exclude_unset=True)
