"""Where a vector database collection lives: one URI, parsed in one place.

Forms (the collection name is part of every one of them):

- `qdrant+local:///abs/dir?collection=NAME` or `qdrant+local:rel/dir?collection=NAME`: Qdrant's
  embedded local mode, a folder on this machine (one process at a time; for tests and small galleries).
- `qdrant://HOST[:PORT]/NAME`: a Qdrant server or cluster over HTTP (port 6333 by default).
- `qdrants://HOST[:PORT]/NAME`: the same over HTTPS.

A server's API key is read from the `QDRANT_API_KEY` environment variable, never from the URI,
so that it does not end up in shell history, process lists or logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from retrieval.errors import UserError

__all__ = ["DEFAULT_PORT", "DatabaseLocation", "parse_database_uri"]

DEFAULT_PORT = 6333  # Qdrant's REST port
_LOCAL, _HTTP, _HTTPS = "qdrant+local", "qdrant", "qdrants"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,255}")
_FORMS = "qdrant+local:///abs/dir?collection=NAME, qdrant://HOST[:PORT]/NAME or qdrants://HOST[:PORT]/NAME"


@dataclass(frozen=True)
class DatabaseLocation:
    """A parsed database URI: a local folder or a server URL, and the collection in it.

    Attributes:
        collection: the collection's name.
        path: the local-mode folder (None for a server).
        url: the server's base URL, e.g. `http://db:6333` (None for local mode).
    """

    collection: str
    path: Path | None = None
    url: str | None = None

    @property
    def is_local(self) -> bool:
        """Whether this is Qdrant's embedded local mode (a folder) rather than a server."""
        return self.path is not None

    def __str__(self) -> str:
        where = f"local folder {self.path}" if self.path is not None else str(self.url)
        return f"collection {self.collection!r} at {where}"


def parse_database_uri(uri: str) -> DatabaseLocation:
    """The location a `--to` / `--backend` URI names.

    Raises:
        UserError: an unknown scheme, a missing or invalid collection name, a local form with a
            host, or a server form without one; the message lists the accepted forms.
    """
    parts = urlsplit(uri.strip())
    scheme = parts.scheme.lower()
    if scheme == _LOCAL:
        if parts.netloc:
            raise UserError(
                f"{uri!r}: a local-mode URI names a folder, not a host; write qdrant+local:///abs/dir?collection=NAME "
                "(three slashes) or qdrant+local:rel/dir?collection=NAME"
            )
        names = parse_qs(parts.query).get("collection", [])
        if not parts.path or len(names) != 1:
            raise UserError(f"{uri!r}: give the folder and one collection: qdrant+local:///abs/dir?collection=NAME")
        return DatabaseLocation(_checked_name(uri, names[0]), path=Path(parts.path))
    if scheme in (_HTTP, _HTTPS):
        if not parts.hostname:
            raise UserError(f"{uri!r}: a server URI needs a host: {scheme}://HOST[:PORT]/NAME")
        if parts.query or parts.username or parts.password:
            raise UserError(
                f"{uri!r}: a server URI is {scheme}://HOST[:PORT]/NAME, without a query or credentials "
                "(the API key goes in the QDRANT_API_KEY environment variable)"
            )
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError as exc:
            raise UserError(f"{uri!r}: the port must be a number from 1 to 65535") from exc
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        protocol = "https" if scheme == _HTTPS else "http"
        return DatabaseLocation(_checked_name(uri, parts.path.strip("/")), url=f"{protocol}://{host}:{port}")
    raise UserError(f"{uri!r} is not a vector database URI; use {_FORMS}")


def _checked_name(uri: str, name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UserError(
            f"{uri!r}: collection name {name!r} must be 1 to 255 letters, digits, '_', '-' or '.'; URIs: {_FORMS}"
        )
    return name
