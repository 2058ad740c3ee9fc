"""The JSON search body (`SearchBody`): typed fields, and its refusals are the service's one-line 400s."""

from __future__ import annotations

import pytest

from retrieval.serve.errors import RequestError
from retrieval.serve.parsing import read_json


def test_a_body_reads_into_typed_fields_and_other_keys_are_ignored():
    body = read_json(b'{"id": 3, "k": 5, "filter": "label = 1", "min_score": "stored", "note": "x"}')
    assert (body.id, body.k, body.filter, body.min_score, body.vector) == (3, 5, "label = 1", "stored", None)
    assert read_json(b'{"vector": [1, 0]}').k == 10


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"vector": [1], "k": true}', "k must be an integer between 1 and 1000, got True"),
        (b'{"id": "3"}', "id must be an integer, got '3'"),
        (b'{"id": 1, "vector": [1]}', 'JSON body must be an object with either "vector" or "id"'),
        (b"[1, 2]", 'JSON body must be an object with either "vector" or "id"'),
    ],
)
def test_a_bad_body_is_a_400_saying_what_is_wrong(body, message):
    with pytest.raises(RequestError, match=message) as caught:
        read_json(body)
    assert caught.value.status == 400
