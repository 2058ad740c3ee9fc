"""tools/bench_audit.py scale: the synthetic audit runs the copy check's graph and finds the copies it plants."""

from __future__ import annotations

from tests.tools.tool_modules import load_tool

bench_audit = load_tool("bench_audit")


def test_the_scale_audit_times_the_copy_check_and_finds_its_planted_copies():
    result = bench_audit._scale_one(2000, 32, 20)
    assert result["leaks_planted"] == 40
    assert result["leaks_found"] == 40
    assert 0 < result["copy_graph_seconds"] < result["seconds"]


def test_the_copy_checks_reading_is_timed_on_real_files():
    assert 0 < bench_audit._copy_reading(images=5, side=32) < 1
