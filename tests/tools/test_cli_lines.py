"""tools/cli_lines.py tells a parser-building function from a logic function, and counts their lines."""

from __future__ import annotations

from pathlib import Path

from tests.tools.tool_modules import load_tool

cli_lines = load_tool("cli_lines")

SOURCE = '''"""A command."""

import argparse


def add_parser(sub):
    parser = sub.add_parser("x")
    parser.add_argument("--y")


@decorated
def run(args):
    """Runs."""
    return 0
'''


def test_a_function_that_adds_arguments_is_parsing_the_rest_logic(tmp_path: Path) -> None:
    path = tmp_path / "command.py"
    path.write_text(SOURCE)
    assert cli_lines.count(path) == (3, 4)  # the decorator line counts with its function
