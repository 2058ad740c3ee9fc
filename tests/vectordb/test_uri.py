"""Database URIs: every documented form parses, every malformed one is a one-line error naming the forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.errors import UserError
from retrieval.vectordb import DatabaseLocation, parse_database_uri


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("qdrant+local:///srv/db?collection=shop", DatabaseLocation("shop", path=Path("/srv/db"))),
        ("qdrant+local:runs/db?collection=shop-2", DatabaseLocation("shop-2", path=Path("runs/db"))),
        ("QDRANT+LOCAL:///srv/db?collection=a.b_c", DatabaseLocation("a.b_c", path=Path("/srv/db"))),
        ("qdrant://db.internal/shop", DatabaseLocation("shop", url="http://db.internal:6333")),
        ("qdrant://10.0.0.5:7000/shop/", DatabaseLocation("shop", url="http://10.0.0.5:7000")),
        ("qdrants://cluster.example.com/shop", DatabaseLocation("shop", url="https://cluster.example.com:6333")),
        ("qdrant://[::1]:6333/shop", DatabaseLocation("shop", url="http://[::1]:6333")),
    ],
)
def test_documented_forms(uri: str, expected: DatabaseLocation) -> None:
    assert parse_database_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("/srv/db", "not a vector database URI"),
        ("milvus://host/c", "not a vector database URI"),
        ("qdrant+local://srv/db?collection=a", "names a folder, not a host"),
        ("qdrant+local:///srv/db", "one collection"),
        ("qdrant+local:///srv/db?collection=a&collection=b", "one collection"),
        ("qdrant+local:///srv/db?collection=a/b", "collection name 'a/b'"),
        ("qdrant:///shop", "needs a host"),
        ("qdrant://host:99999/shop", "port must be a number"),
        ("qdrant://host/", "collection name ''"),
        ("qdrant://host/a/b", "collection name 'a/b'"),
        ("qdrant://host/shop?api_key=secret", "QDRANT_API_KEY"),
        ("qdrant://user:pw@host/shop", "QDRANT_API_KEY"),
    ],
)
def test_malformed_uris_say_what_is_wrong(uri: str, says: str) -> None:
    with pytest.raises(UserError, match=says) as caught:
        parse_database_uri(uri)
    assert "\n" not in str(caught.value)
