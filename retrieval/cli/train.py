"""`retrieval train`: train an embedder and print the test Recall@K of the selected checkpoint.

This module parses and prints; the runs (one, one a seed, or a resumed one) are `retrieval.train.runs`
(a `TrainRequest` in, each run's closing lines said as it ends, a `TrainingReport` out).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.cli._common import add_config_arguments, seed_list
from retrieval.cli._progress import showing_progress

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("train", help="train an embedder (no arguments: the embedded digits demo)")
    add_config_arguments(parser)
    parser.add_argument("--output-dir", type=Path, help="run directory (default: runs/<data>-<loss>-<time>)")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR|CKPT",
        help="continue a run from its directory or its checkpoints/last.pt (same run directory)",
    )
    parser.add_argument(
        "--seeds",
        type=seed_list,
        metavar="0,1,2",
        help="train once per seed (run directories seed-N inside --output-dir) and print mean ± sd",
    )


def run(args: argparse.Namespace) -> int:
    """Train (or resume); the stage each run is in prints as it starts (`showing_progress`).

    What the arguments, the config and the dataset's files can tell is checked before PyTorch loads.
    """
    from retrieval.train.runs import TrainRequest, check_training_request, run_training

    request = TrainRequest(
        config=args.config,
        overrides=tuple(args.overrides),
        output_dir=args.output_dir,
        resume=args.resume,
        seeds=tuple(args.seeds or ()),
    )
    check_training_request(request)  # a typo fails at once, before seconds of imports
    with showing_progress("train") as log:
        log.info("loading PyTorch and timm ...")  # the first line, before the imports that take seconds
        run_training(request, lambda line: print(line, flush=True))
    return 0
