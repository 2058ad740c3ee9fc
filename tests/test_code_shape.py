"""Size limits that keep the code and the results page readable: a function fits on a screen, a page stays short.

A function over 80 lines does several things (split it into named steps); docs/benchmarks.md holds the
results, at most 300 lines, and the record behind them lives in docs/experiments/.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
MAX_BENCHMARK_LINES = 300


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """The (name, lines) of each function or method in `source` longer than `limit` lines, its docstring included."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_rule_counts_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    assert long_functions(f"def f():\n{body}\n", MAX_FUNCTION_LINES) == [("f", 81)]
    assert long_functions(f"def f():\n{body}\n", 81) == []


def test_no_function_is_over_80_lines() -> None:
    found = [
        f"{path.relative_to(ROOT)}::{name} ({lines} lines)"
        for path in sorted((ROOT / "retrieval").rglob("*.py"))
        for name, lines in long_functions(path.read_text(), MAX_FUNCTION_LINES)
    ]
    assert not found, "split into named steps: " + ", ".join(found)


def test_the_benchmarks_page_is_at_most_300_lines() -> None:
    lines = len((ROOT / "docs" / "benchmarks.md").read_text().splitlines())
    assert lines <= MAX_BENCHMARK_LINES, f"docs/benchmarks.md is {lines} lines; move the record to docs/experiments/"
