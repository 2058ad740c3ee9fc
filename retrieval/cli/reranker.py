"""`retrieval reranker`: train a learned pairwise re-ranker of a checkpoint's results on its own data.

    retrieval reranker --checkpoint runs/glyphs/checkpoints/best.pt --output-dir runs/glyphs/reranker
    retrieval evaluate --checkpoint runs/glyphs/checkpoints/best.pt --reranker runs/glyphs/reranker

The checkpoint's saved config says where the data is; `--config` / `--set` change it (the `reranker`
section: epochs, pairs, the blends tried). It prints whether the re-ranker beat the embedding alone on
validation. This module parses and prints; the work is `retrieval.reranker.build` (a `RerankerRequest`
in, a `RerankerReport` out).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._common import add_config_arguments, existing_checkpoint
from retrieval.cli._progress import showing_progress

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "reranker", help="train a learned pairwise re-ranker of a checkpoint's top results (chosen on validation)"
    )
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="CKPT", help="a run's checkpoints/best.pt")
    add_config_arguments(parser)
    parser.add_argument(
        "--output-dir",
        type=Path,
        required=True,
        metavar="DIR",
        help="the re-ranker directory: weights, ONNX export, manifest.json (replaced if it holds a re-ranker)",
    )


def run(args: argparse.Namespace) -> int:
    """Train the re-ranker; a missing checkpoint or a config typo fails before PyTorch loads."""
    from retrieval.config import check_config
    from retrieval.reranker.build import RerankerRequest, train_reranker

    existing_checkpoint(args.checkpoint)
    check_config(args.config, args.overrides)
    request = RerankerRequest(args.checkpoint, args.output_dir, args.config, tuple(args.overrides))
    with showing_progress("reranker"):
        report = train_reranker(request)
    print(report.text())
    return 0
