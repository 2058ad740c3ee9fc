"""Sweep cells: grid parsing, the cartesian product x seeds, config checks, and the command of each cell."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from retrieval.errors import UserError
from retrieval.sweep import cell_command, parse_grid, plan_cells


def test_parse_grid_keeps_order_and_strings() -> None:
    grid = parse_grid(["loss.gamma=0, 0.5,1", "train.lr=1e-3,3e-4"])
    assert grid == {"loss.gamma": ["0", "0.5", "1"], "train.lr": ["1e-3", "3e-4"]}


@pytest.mark.parametrize(
    ("specs", "match"),
    [
        (["gamma=1,2"], "section.key"),
        (["loss.gamma"], "section.key"),
        (["loss.gamma=1,,2"], "section.key"),
        (["loss.gamma=1,1"], "repeats"),
        (["loss.gamma=1", "loss.gamma=2"], "twice"),
        (["train.seed=0,1"], "--seeds"),
        ([], "at least one"),
    ],
)
def test_parse_grid_rejects_malformed_specs(specs: list[str], match: str) -> None:
    with pytest.raises(UserError, match=match):
        parse_grid(specs)


def test_plan_is_the_cartesian_product_times_seeds(tmp_path: Path) -> None:
    grid = parse_grid(["loss.gamma=8,16", "train.lr=1e-3,3e-4,1e-4"])
    cells = plan_cells(None, ["train.epochs=1"], grid, [0, 1], tmp_path)
    assert len(cells) == 2 * 3 * 2
    assert [cell.values for cell in cells[:4]] == [(("loss.gamma", "8"), ("train.lr", "1e-3"))] * 2 + [
        (("loss.gamma", "8"), ("train.lr", "3e-4"))
    ] * 2
    assert cells[1].directory == tmp_path / "loss.gamma=8__train.lr=1e-3" / "seed-1"
    assert cells[1].overrides == ["loss.gamma=8", "train.lr=1e-3", "train.seed=1"]
    assert len({cell.directory for cell in cells}) == len(cells)
    # Without --seeds, the config's own seed.
    assert [cell.seed for cell in plan_cells(None, ["train.seed=7"], parse_grid(["loss.gamma=8"]), None, tmp_path)] == [
        7
    ]


def test_plan_checks_every_cell_config_and_refuses_test_selection(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown config key loss.gama"):
        plan_cells(None, [], parse_grid(["loss.gama=1,2"]), None, tmp_path)
    with pytest.raises(UserError, match="train.epochs must be int"):
        plan_cells(None, [], parse_grid(["train.epochs=2,two"]), None, tmp_path)
    with pytest.raises(UserError, match="selects checkpoints on the test set"):
        plan_cells(None, ["train.select_on_test=true"], parse_grid(["loss.gamma=1"]), None, tmp_path)
    with pytest.raises(UserError, match="selects checkpoints on the test set"):
        plan_cells(None, [], parse_grid(["train.select_on_test=false,true"]), None, tmp_path)


def test_cell_command_is_a_fresh_train_or_a_resume(tmp_path: Path) -> None:
    (cell,) = plan_cells(None, [], parse_grid(["loss.gamma=4"]), [2], tmp_path)
    command = cell_command(cell, "base.yaml", ["train.epochs=3"])
    assert command[:4] == [sys.executable, "-m", "retrieval.cli.main", "train"]
    assert command[4:] == [
        "--config",
        "base.yaml",
        *("--set", "train.epochs=3", "--set", "loss.gamma=4", "--set", "train.seed=2"),
        *("--output-dir", str(cell.directory)),
    ]
    (cell.directory / "checkpoints").mkdir(parents=True)
    (cell.directory / "checkpoints" / "last.pt").write_bytes(b"")
    assert cell_command(cell, "base.yaml", ["train.epochs=3"])[4:] == ["--resume", str(cell.directory)]
