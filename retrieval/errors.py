"""The one exception type a user can cause and fix.

Library code raises `UserError` (a `ValueError`) for problems in the user's input: a bad
config key, a missing file, a dataset that cannot be evaluated. The CLI turns it into one
line on stderr and exit code 2; anything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input from the user; the message says what is wrong and how to fix it."""
