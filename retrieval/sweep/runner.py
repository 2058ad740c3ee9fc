"""Run a sweep's cells as `retrieval train` subprocesses, one or N at a time, skipping finished ones.

A subprocess per cell keeps runs independent (fresh RNG, memory, thread settings) and lets a
killed sweep lose only the cells in flight: a restart skips every cell with a `result.json`
and continues an interrupted cell from its `checkpoints/last.pt` (`train --resume`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import retrieval
from retrieval.sweep.grid import Cell
from retrieval.train.result import RunResult
from retrieval.train.trackers import SWEEP_DIR_ENV

__all__ = ["cell_command", "run_cells"]

# The directory that holds the `retrieval` package being run, so subprocesses import the same code.
_PACKAGE_ROOT = str(Path(retrieval.__file__).resolve().parent.parent)


def cell_command(cell: Cell, config_path: str | None, overrides: Sequence[str]) -> list[str]:
    """The `retrieval train` command of one cell: a fresh run, or `--resume` of an interrupted one."""
    command = [sys.executable, "-m", "retrieval.cli.main", "train"]
    if (cell.directory / "checkpoints" / "last.pt").is_file():
        return [*command, "--resume", str(cell.directory)]
    if config_path is not None:
        command += ["--config", str(config_path)]
    for override in [*overrides, *cell.overrides]:
        command += ["--set", override]
    return [*command, "--output-dir", str(cell.directory)]


def run_cells(
    cells: Sequence[Cell],
    config_path: str | None,
    overrides: Sequence[str],
    jobs: int = 1,
    report: Callable[[str], None] = print,
    sweep_dir: Path | None = None,
) -> list[Cell]:
    """Train every unfinished cell, `jobs` at a time; each writes `train.log` in its directory.

    Args:
        cells: from `plan_cells`.
        config_path: the base config.
        overrides: `--set` overrides of every cell.
        jobs: cells trained at once (give each `train.threads` so that jobs x threads fits the CPU).
        report: receives one progress line per skipped, finished or failed cell.
        sweep_dir: the sweep directory; the cells' experiment trackers group their runs by it.

    Returns:
        The cells that failed (non-zero exit); their logs say why.
    """
    todo = [cell for cell in cells if not cell.is_finished]
    skipped = len(cells) - len(todo)
    if skipped:
        report(f"{skipped} of {len(cells)} cells already finished (result.json found), skipped")
    counter = iter(range(1, len(todo) + 1))

    def run_one(cell: Cell) -> Cell | None:
        cell.directory.mkdir(parents=True, exist_ok=True)
        command = cell_command(cell, config_path, overrides)
        started = time.perf_counter()
        with open(cell.directory / "train.log", "a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            env = _environment(sweep_dir)
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        seconds = time.perf_counter() - started
        position = f"[{next(counter)}/{len(todo)}]"
        if code != 0 or not cell.is_finished:
            report(f"{position} {cell.name}: FAILED (exit {code}) after {seconds:.0f}s; see {cell.directory}/train.log")
            return cell
        test = RunResult.read(cell.directory).test
        report(
            f"{position} {cell.name}: test Recall@1 {test['recall@1']:.4f} MAP@R {test['map@r']:.4f} ({seconds:.0f}s)"
        )
        return None

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [cell for cell in pool.map(run_one, todo) if cell is not None]


def _environment(sweep_dir: Path | None) -> dict[str, str]:
    """This process's environment, the running `retrieval` package first on PYTHONPATH, and the sweep directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    if sweep_dir is not None:
        env[SWEEP_DIR_ENV] = str(sweep_dir.resolve())
    return env
