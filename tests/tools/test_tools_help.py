"""Every script in tools/ imports and answers `--help`: its imports follow the package layout."""

from __future__ import annotations

import sys

import pytest

from tests.tools.tool_modules import TOOLS, load_tool


@pytest.mark.parametrize("name", sorted(path.stem for path in TOOLS.glob("*.py")))
def test_tool_answers_help(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tool = load_tool(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exited:
        tool.main()
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
