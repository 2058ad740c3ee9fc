"""tools/mistake_timings.py: one mistake timed in a fresh interpreter, refused before PyTorch."""

from __future__ import annotations

import pytest

from tests.tools.tool_modules import load_tool

mistake_timings = load_tool("mistake_timings")

pytestmark = pytest.mark.slow


def test_a_mistake_is_timed_and_answered_without_loading_pytorch():
    code, wall, cpu, loading = mistake_timings.time_case(["train", "--set", "loss.name=anchr"], mistake_timings.ROOT)
    assert code == 2 and not loading
    assert 0 < cpu and cpu <= wall * 2 + 1  # CPU seconds of the child alone, at most its threads' worth
