"""The one exception type a user can cause and fix.

Library code raises `UserError` (a `ValueError`) for problems in the user's input: a bad
config key, a missing file, a dataset that cannot be evaluated. The CLI turns it into one
line on stderr and exit code 2; anything else is a bug and keeps its traceback. `BackendFailed`
is the one kind of it a server must tell apart: its database failing, not its client's request.
`short_repr` is how such a message quotes the value it refuses.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["BackendFailed", "UserError", "short_repr"]


class UserError(ValueError):
    """Bad input from the user; the message says what is wrong and how to fix it."""


def short_repr(value: Any, limit: int = 40) -> str:
    """`repr(value)` cut to `limit` characters: an error message quotes a user's value, it does not echo it.

    An integer too long for `repr` (over 4,300 digits raise in Python) is described by its size.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        digits = len(str(value)) if value.bit_length() < 10_000 else int(value.bit_length() * math.log10(2)) + 1
        return f"an integer of {digits} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


class BackendFailed(UserError):
    """A database the toolkit searches or writes (a Qdrant server or folder) failed to answer.

    A `UserError` for the command line (the message names the database, so its operator can fix
    the URL, the server or the folder); the search service answers its clients a 503 that names
    neither, since a failure of the service's own database is not the request's fault.
    """
