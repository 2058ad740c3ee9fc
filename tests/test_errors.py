"""`short_repr`: the one way an error message quotes a user's value."""

from __future__ import annotations

from retrieval.errors import short_repr


def test_a_quoted_value_is_cut_to_its_limit_and_a_huge_integer_is_described_not_printed():
    assert short_repr("abc") == "'abc'"
    assert short_repr("x" * 100) == "'" + "x" * 36 + "..." and len(short_repr("x" * 100)) == 40
    assert len(short_repr(list(range(100)), limit=60)) == 60
    assert short_repr(True) == "True" and short_repr(10**29) == str(10**29)
    assert short_repr(10**40) == "an integer of 41 digits"
    assert short_repr(-(10**20_000)).startswith("an integer of 2000")  # repr() itself would raise past 4,300 digits
