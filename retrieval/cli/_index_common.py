"""What several `retrieval index` subcommands share: image inputs, model and lock flags, the measurement lines."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.choices.splits import SPLITS
from retrieval.cli._common import add_column_types_argument
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT

if TYPE_CHECKING:
    from retrieval.index.manifest import Measured

__all__ = [
    "add_checkpoint_check",
    "add_image_inputs",
    "add_lock_timeout",
    "format_measurement",
]

_SPLIT_HELP = (
    "CSV rows to index: all (default: every row, whatever its split), train, val, test, or gallery "
    "(test rows with is_gallery=1; every test row when the CSV has no is_gallery column)"
)


def add_image_inputs(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """`--csv` or `--images`, `--split` and `--column-types`: the images `index build` and `index add` embed."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--csv", type=Path, metavar="FILE", help="dataset CSV: path,label,split[,...] (see --split)")
    group.add_argument("--images", type=Path, metavar="DIR", help="every image under DIR; label = its subfolder")
    parser.add_argument("--split", default="all", choices=SPLITS, help=_SPLIT_HELP)
    add_column_types_argument(parser)


def add_checkpoint_check(parser: argparse.ArgumentParser) -> None:
    """`--checkpoint` or `--model` of the subcommands that embed with the model the index records."""
    model = parser.add_mutually_exclusive_group()
    model.add_argument(
        "--checkpoint", type=Path, metavar="CKPT", help="default: the one the index records (must be the same file)"
    )
    model.add_argument(
        "--model", type=Path, metavar="EXPORT_DIR", help="for an index built from an export: default the one it records"
    )


def add_lock_timeout(parser: argparse.ArgumentParser) -> None:
    """`--lock-timeout` of the subcommands that write an index."""
    parser.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=DEFAULT_LOCK_TIMEOUT,
        metavar="SECONDS",
        help=f"wait this long for another writer of the index to finish (default: {DEFAULT_LOCK_TIMEOUT:g})",
    )


def _seconds(text: str) -> float:
    """A `--lock-timeout` value: a finite number of seconds >= 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"takes a number of seconds >= 0, like 60, got {text!r}")
    return seconds


def format_measurement(measured: Measured) -> str:
    """Recall, latency, throughput and size lines of a `SearchIndex` measurement (speed from enough queries only)."""
    from retrieval.index.manifest import well_measured

    size = (
        f"bytes/vector: {measured.resident_bytes_per_vector or 0:.1f} in memory, "
        f"{measured.disk_bytes_per_vector or 0:.1f} on disk"
    )
    if measured.recall_at_k is None or not well_measured(measured):
        return f"{_recall_line(measured)}\nlatency, throughput: not measured (too few vectors)\n{size}"
    return "\n".join(
        [
            _recall_line(measured),
            f"latency p50 / p99: {measured.p50_ms or 0:.3f} / {measured.p99_ms or 0:.3f} ms (one query, one thread)",
            f"batch throughput: {measured.batch_qps or 0:,.0f} queries/s ({measured.batch_threads} threads)",
            size,
        ]
    )


def _recall_line(measured: Measured) -> str:
    """The recall line, saying what it counts when the index holds fewer than k candidates a query."""
    from retrieval.index.manifest import MIN_QUERIES

    k, queries = measured.k, measured.queries or 0
    neighbors = measured.k if measured.neighbors is None else measured.neighbors
    if measured.recall_at_k is None or queries < MIN_QUERIES:
        held = queries if measured.ntotal is None else measured.ntotal
        return (
            f"recall@{k} vs exact: not measured: too few vectors (the index holds {held}; each is searched for "
            f"among the others, and measuring needs {MIN_QUERIES} queries)"
        )
    line = f"recall@{k} vs exact: {measured.recall_at_k:.4f} ({queries} queries)"
    if neighbors is not None and k is not None and neighbors < k:
        line += f"; each query has only {neighbors} other vectors to find, so recall counts those {neighbors}"
    return line
