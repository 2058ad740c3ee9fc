"""The one exception type a user can cause and fix.

Library code raises `UserError` (a `ValueError`) for problems in the user's input: a bad
config key, a missing file, a dataset that cannot be evaluated. The CLI turns it into one
line on stderr and exit code 2; anything else is a bug and keeps its traceback. `BackendFailed`
is the one kind of it a server must tell apart: its database failing, not its client's request.
"""

__all__ = ["BackendFailed", "UserError"]


class UserError(ValueError):
    """Bad input from the user; the message says what is wrong and how to fix it."""


class BackendFailed(UserError):
    """A database the toolkit searches or writes (a Qdrant server or folder) failed to answer.

    A `UserError` for the command line (the message names the database, so its operator can fix
    the URL, the server or the folder); the search service answers its clients a 503 that names
    neither, since a failure of the service's own database is not the request's fault.
    """
