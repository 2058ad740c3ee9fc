"""`RequestError`: a request the service refuses, answered as `{"error": "..."}` with a 4xx (or 503) status."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["RequestError"]


class RequestError(Exception):
    """What is wrong with one request, in one line, and the HTTP status (and headers) to answer with."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
