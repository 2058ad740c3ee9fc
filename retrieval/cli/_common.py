"""Arguments shared by the subcommands, and the checks of a flag's path before any work (`existing_checkpoint` is the
library's, `retrieval.runtime.checkpoint_files`, shared by every command that reads a checkpoint)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from retrieval.errors import UserError
from retrieval.runtime.checkpoint_files import existing_checkpoint  # the commands' one check of a checkpoint path

__all__ = [
    "add_column_types_argument",
    "add_config_arguments",
    "add_embedding_arguments",
    "existing_checkpoint",
    "output_file",
    "output_folder",
    "with_folder",
    "seed_list",
]


def add_config_arguments(
    parser: argparse.ArgumentParser, default: str = "the embedded digits demo", example: str = "train.epochs=5"
) -> None:
    """`--config FILE.yaml` and repeatable `--set key.sub=value`; `default` says what runs without a file."""
    parser.add_argument("--config", metavar="FILE.yaml", help=f"YAML config (default: {default})")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override one config key, e.g. --set {example} (repeatable)",
    )


def add_embedding_arguments(parser: argparse.ArgumentParser) -> None:
    """`--batch-size`, `--num-workers` and `--device` of the commands that embed images with a checkpoint."""
    parser.add_argument("--batch-size", type=int, default=64, help="images per forward pass (default: 64)")
    parser.add_argument("--num-workers", type=int, default=min(4, os.cpu_count() or 1), help="image decoding processes")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")


def add_column_types_argument(parser: argparse.ArgumentParser) -> None:
    """`--column-types NAME=TYPE,...` of the commands that read image metadata (`retrieval.core.column_types`)."""
    parser.add_argument(
        "--column-types",
        metavar="NAME=TYPE,...",
        help="metadata column types (int, float, str) instead of inferring them, e.g. price=float,sku=str; "
        "other columns: int64 if every non-empty cell is an integer, else float64 if every one is a number, "
        "else str; empty cells are null",
    )


def seed_list(text: str) -> list[int]:
    """`--seeds 0,1,2` -> [0, 1, 2]: distinct integers >= 0."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes comma-separated integers like 0,1,2, got {text!r}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds takes distinct integers >= 0 like 0,1,2, got {text!r}")
    return seeds


def distance_ratio(text: str) -> float:
    """A copy check's distance ratio in [0, 1) (`audit --leak-ratio`, `evaluate --leak-ratio`)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"takes a distance ratio in [0, 1), like 0.5, got {text!r}")
    return value


def output_file(text: str) -> Path:
    """An argument naming a file the command writes at its end (`--json FILE`): refused at once if it is a folder.

    Its folder need not exist: `with_folder` makes it when the file is written, so a typo in it never
    costs the result of the work.
    """
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; name a file in it, e.g. {path / 'metrics.json'}")
    return path


def output_folder(path: Path, flag: str, own_file: str) -> Path:
    """`path`, refused at once (before any work or torch) when the command could not, or should not, write there.

    A file in the way (at `path` or a parent) is refused, and so is a non-empty folder without `own_file`:
    the command replaces or writes into its folder, so anything else there would be lost or mixed with it.

    Raises:
        UserError: a file is in the way, or the folder holds something other than this command's output.
    """
    from retrieval.runtime.directories import refuse_file_in_the_way

    refuse_file_in_the_way(path, f"{flag} {path}")
    if path.is_dir() and not (path / own_file).exists() and any(path.iterdir()):
        raise UserError(
            f"{flag} {path} holds other files and no {own_file}; name a new or empty folder, so nothing there is lost"
        )
    return path


def with_folder(path: Path) -> Path:
    """`path`, once the folder it goes into exists (made with its parents when missing).

    Raises:
        UserError: the folder cannot be made (a file of that name is in the way, no permission).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make the folder {path.parent} for {path}: {exc.strerror or exc}") from exc
    return path
