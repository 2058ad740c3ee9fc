"""The one-line error of a command: what every refusal test of the command line reads."""

from __future__ import annotations

import pytest

from retrieval.cli.main import main


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single `error:` line a command printed on stderr since the last read of `capsys`."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def one_line_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    """The single `error:` line `retrieval ARGS` prints on stderr for a user mistake, its exit code 2 checked."""
    capsys.readouterr()
    assert main(args) == 2
    return error_line(capsys)
