"""`min_score_for`: the one reading of a minimum score, for `index query --min-score` and the service's `min_score`."""

from __future__ import annotations

import pytest

from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError
from retrieval.index.min_score import QueryMatch, keep_matches, min_score_for


@pytest.mark.parametrize(
    ("value", "expected"), [(None, None), ("", None), ("0.5", 0.5), (-1, -1.0), (1, 1.0), ("stored", 0.7)]
)
def test_a_minimum_is_a_cosine_or_the_stored_threshold(value, expected) -> None:
    assert min_score_for(value, MatchThreshold(score=0.7)) == expected


@pytest.mark.parametrize(
    ("value", "stored", "message"),
    [
        ("60", MatchThreshold(score=0.7), "min score must be a cosine in [-1, 1] (e.g. 0.6) or 'stored', got '60'"),
        (True, None, "min score must be a cosine"),
        ("١", None, "min score must be a cosine"),
        ("stored", None, "this index stores no match threshold"),
    ],
)
def test_a_wrong_minimum_is_one_line(value, stored, message) -> None:
    with pytest.raises(UserError) as caught:
        min_score_for(value, stored)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_matches_below_the_minimum_are_dropped_not_replaced() -> None:
    results = [QueryMatch(rank=rank, score=score, id=rank) for rank, score in enumerate((0.9, 0.6, 0.3), start=1)]
    assert [match.rank for match in keep_matches(results, 0.6)] == [1, 2]
    assert keep_matches(results, None) == results and results[0].column("id") == 1
