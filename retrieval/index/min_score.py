"""Minimum scores at search time: "is there a match at all?" answered by dropping results below a threshold.

A result whose score (cosine of the query and the item) is below the minimum is dropped, never
replaced: a query can get fewer than k results, or none. The minimum is a number the caller
gives, or `stored`: the threshold `retrieval evaluate --save-threshold FMR` chose on validation
pairs at that false match rate, which the checkpoint carries and `index build` copies into the
manifest (`match_threshold`). No minimum is applied unless asked for: a threshold trades missed
matches for false ones, and only the caller knows which costs more.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar

from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError
from retrieval.index.query import QueryAnswer, QueryMatch  # the records a minimum is applied to, importable here

__all__ = ["STORED", "QueryAnswer", "QueryMatch", "Scored", "keep_matches", "min_score_for", "no_match_text"]

STORED = "stored"  # the `--min-score` / `min_score` value that means the manifest's match_threshold


class Scored(Protocol):
    """A search result: anything with the `score` (cosine) a minimum is compared with."""

    @property
    def score(self) -> float: ...


_Result = TypeVar("_Result", bound=Scored)


def min_score_for(value: Any, stored: MatchThreshold | None) -> float | None:
    """The minimum a `--min-score` or a request's `min_score` asks for, as a number (None: no minimum).

    The one reading of a minimum, for `index query` and the server alike: the value parsed, then
    `stored` resolved against the index's threshold.

    Raises:
        UserError: a value that is not a cosine or `stored`, or `stored` for an index without a threshold.
    """
    return _resolve(_parse(value), stored)


def _parse(value: Any) -> float | str | None:
    """A minimum score as given (a number in [-1, 1], its text, `stored`, or None/"" for none).

    Raises:
        UserError: anything else; scores are cosines, so a number outside [-1, 1] is a mistake (a percentage?).
    """
    if value is None or value == "" or value == STORED:
        return value or None
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and value.isascii():  # float() also reads other scripts' digits ("١" is 1)
        try:
            number = float(value)
        except ValueError:
            pass
    if not -1.0 <= number <= 1.0:  # NaN fails too
        raise UserError(f"min score must be a cosine in [-1, 1] (e.g. 0.6) or {STORED!r}, got {value!r}")
    return number


def _resolve(value: float | str | None, stored: MatchThreshold | None) -> float | None:
    """The number a parsed minimum stands for: itself, the index's `stored` threshold for `stored`, or None.

    Raises:
        UserError: `stored` for an index without a stored threshold.
    """
    if value != STORED:
        return None if value is None else float(value)
    if stored is None:
        raise UserError(
            "this index stores no match threshold; choose one with `retrieval evaluate --checkpoint CKPT "
            "--save-threshold 1e-3` and build the index again, or pass a number such as 0.6"
        )
    return stored.score


def keep_matches(results: list[_Result], min_score: float | None) -> list[_Result]:
    """The results scoring at least `min_score`; all of them when it is None."""
    if min_score is None:
        return results
    return [result for result in results if result.score >= min_score]


def no_match_text(min_score: float) -> str:
    """What a query with no result left says: `no match above 0.6123`."""
    return f"no match above {min_score:.4f}"
