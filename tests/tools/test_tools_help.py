"""Every script in tools/ imports and answers `--help`: its imports follow the package layout.

A module the scripts share (no `__main__` block, e.g. `cross_style_dataset.py`) must import.
"""

from __future__ import annotations

import sys

import pytest

from tests.tools.tool_modules import TOOLS, load_tool

SCRIPTS = sorted(path.stem for path in TOOLS.glob("*.py") if 'if __name__ == "__main__":' in path.read_text())


@pytest.mark.parametrize("name", sorted(path.stem for path in TOOLS.glob("*.py") if path.stem not in SCRIPTS))
def test_shared_tool_module_imports(name: str) -> None:
    assert load_tool(name).__all__


@pytest.mark.parametrize("name", SCRIPTS)
def test_tool_answers_help(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tool = load_tool(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exited:
        tool.main()
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
