"""`python -m retrieval` is the `retrieval` command (what `torchrun -m retrieval` starts), checked in-process."""

from __future__ import annotations

import runpy

import pytest

from retrieval import __version__


def test_running_the_package_runs_the_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr("sys.argv", ["retrieval", "--version"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("retrieval", run_name="__main__")
    assert exit_.value.code == 0
    assert __version__ in capsys.readouterr().out
