"""A sweep's cells: the cartesian product of `--grid key=v1,v2,...` values, times seeds.

Each cell is one `retrieval train` run with its own `--set` overrides and seed, in its own
directory `OUT/<key>=<value>__<key>=<value>/seed-<seed>`, so a restarted sweep finds the runs
it already finished (they hold `result.json`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from retrieval.config import Config, load_config
from retrieval.errors import UserError
from retrieval.train.runs import seed_run_dir

__all__ = ["Cell", "parse_grid", "plan_cells"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


@dataclass(frozen=True)
class Cell:
    """One run of the sweep."""

    values: tuple[tuple[str, str], ...]  # (config key, value) of every varied parameter, in grid order
    seed: int  # train.seed
    directory: Path  # the run directory

    @property
    def overrides(self) -> list[str]:
        """The `--set` arguments that make this cell, seed included."""
        return [*(f"{key}={value}" for key, value in self.values), f"train.seed={self.seed}"]

    @property
    def name(self) -> str:
        """`loss.gamma=4 seed 0`, for progress lines."""
        return " ".join(f"{key}={value}" for key, value in self.values) + f" seed {self.seed}"

    @property
    def is_finished(self) -> bool:
        """The run wrote its result (the trainer writes `result.json` last)."""
        return (self.directory / "result.json").is_file()


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """`["loss.gamma=0,0.5,1", "train.lr=1e-3,3e-4"]` -> `{"loss.gamma": ["0", "0.5", "1"], ...}`.

    Raises:
        UserError: on a spec without `=` or a dotted key, an empty or repeated value, a key given
            twice, or `train.seed` (seeds come from `--seeds`).
    """
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        values = [value.strip() for value in text.split(",")]
        if not sep or "." not in key or not all(values):
            raise UserError(f"--grid expects section.key=v1,v2,... (e.g. loss.gamma=0,1,2), got {spec!r}")
        if key == "train.seed":
            raise UserError("do not sweep train.seed with --grid; pass the seeds with --seeds 0,1,2")
        if key in grid:
            raise UserError(f"--grid gives {key} twice; list all its values in one --grid {key}=v1,v2,...")
        if len(set(values)) != len(values):
            raise UserError(f"--grid {key} repeats a value: {text!r}")
        grid[key] = values
    if not grid:
        raise UserError("a sweep needs at least one --grid section.key=v1,v2,...")
    return grid


def plan_cells(
    config_path: str | None,
    overrides: Sequence[str],
    grid: dict[str, list[str]],
    seeds: Sequence[int] | None,
    output_dir: Path,
) -> list[Cell]:
    """Every cell of the grid for every seed, each config checked now so a typo fails before any training.

    Args:
        config_path: the base YAML config (None: the digits demo).
        overrides: `--set` overrides applied to every cell before the grid's.
        grid: from `parse_grid`.
        seeds: the seeds of every cell; None for the config's own `train.seed`.
        output_dir: the sweep directory.

    Returns:
        Cells in grid order (the last key varies fastest), seeds innermost.

    Raises:
        UserError: a cell's config is invalid, or selects on the test set.
    """
    base = load_config(config_path, overrides)
    _require_honest_selection(base, "the base config")
    seeds = list(seeds) if seeds else [base.train.seed]
    cells = []
    for combination in itertools.product(*grid.values()):
        values = tuple(zip(grid, combination, strict=True))
        folder = output_dir / "__".join(_UNSAFE.sub("_", f"{key}={value}") for key, value in values)
        for seed in seeds:
            cell = Cell(values, seed, seed_run_dir(folder, seed))
            _require_honest_selection(load_config(config_path, [*overrides, *cell.overrides]), cell.name)
            cells.append(cell)
    folders = [cell.directory for cell in cells]
    if len(set(folders)) != len(folders):
        raise UserError("two grid values map to the same run directory name; use values that differ in [A-Za-z0-9._+-]")
    return cells


def _require_honest_selection(config: Config, where: str) -> None:
    if config.train.select_on_test:
        raise UserError(
            f"{where} selects checkpoints on the test set (train.select_on_test); a sweep compares settings "
            "on validation only: give the data a validation split (CSV split=val, data.val_fraction or "
            "data.val_classes) and set train.select_on_test=false"
        )
