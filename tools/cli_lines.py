"""Count `retrieval/cli/` lines of argument parsing against lines of logic (issue 48: the CLI only parses).

    python tools/cli_lines.py            # totals
    python tools/cli_lines.py --files    # and per file

A top-level function is parsing when it builds the parser (calls `add_argument`, `add_parser`,
`add_subparsers`, `add_argument_group` or `add_mutually_exclusive_group`); every other function
(running a command, turning arguments into a request, printing) is logic. Lines are the function's
source lines, its docstring included; module docstrings, imports and constants are neither.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "retrieval" / "cli"
_PARSER_CALLS = {"add_argument", "add_parser", "add_subparsers", "add_argument_group", "add_mutually_exclusive_group"}


def _builds_parser(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether `function` calls one of argparse's parser-building methods."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PARSER_CALLS
        for node in ast.walk(function)
    )


def count(path: Path) -> tuple[int, int]:
    """(parsing lines, logic lines) of the top-level functions in `path`."""
    parsing = logic = 0
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1 + len(node.decorator_list)
            if _builds_parser(node):
                parsing += lines
            else:
                logic += lines
    return parsing, logic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", action="store_true", help="print each file's counts too")
    args = parser.parse_args()
    totals = [0, 0]
    for path in sorted(CLI.glob("*.py")):
        parsing, logic = count(path)
        totals[0] += parsing
        totals[1] += logic
        if args.files:
            print(f"{path.name:24} parsing {parsing:4d}  logic {logic:4d}")
    print(f"retrieval/cli: {totals[0]} lines of parsing, {totals[1]} lines of logic")


if __name__ == "__main__":
    main()
