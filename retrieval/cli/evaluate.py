"""`retrieval evaluate`: Recall@K / MAP@R of a checkpoint on the test split of its (or another) dataset.

`--backbone NAME [--weights FILE]` scores a timm model without training instead (its pooled
features, `retrieval.inference.backbone`) on the data of `--config` / `--set` (the digits demo by default).

On closed-set data it also reports results per training-frequency group and, on request, scores
the proxy classifier (`--classification DIR`), calibrates it (`--calibrate`), measures pair-level
verification with match thresholds (`--verification`, `--save-threshold`) and draws a grid of
queries with their results (`--grid FILE.png`). This module parses and prints; the evaluation is
`retrieval.evaluate.run` (an `EvaluationRequest` in, an `EvaluationReport` out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retrieval.cli._common import (
    add_config_arguments,
    distance_ratio,
    existing_checkpoint,
    output_file,
    with_folder,
)
from retrieval.cli._progress import showing_progress
from retrieval.report.grid_modes import GRID_MODES
from retrieval.runtime.files import write_text

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("evaluate", help="measure Recall@K and MAP@R of a checkpoint")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, metavar="CKPT", help="a run's checkpoints/best.pt")
    source.add_argument(
        "--backbone", metavar="NAME", help="a timm model without training: its pooled features, L2-normalized"
    )
    parser.add_argument("--weights", type=Path, metavar="FILE", help="--backbone's .safetensors/.pth state dict")
    add_config_arguments(parser)
    parser.add_argument(
        "--json",
        type=output_file,
        metavar="FILE",
        help="also write the metrics and their 95%% intervals to FILE as JSON",
    )
    parser.add_argument(
        "--per-query",
        type=output_file,
        metavar="FILE.npz",
        help="also write every query's Recall@1 and AP@R to FILE.npz, for `retrieval compare`",
    )
    parser.add_argument("--grid", type=output_file, metavar="FILE.png", help="draw queries with their top-5 results")
    parser.add_argument(
        "--rerank",
        metavar="SPEC",
        help="re-rank results: qe | dba | kreciprocal (parameters chosen on validation), or e.g. qe:k=2,alpha=3",
    )
    parser.add_argument(
        "--reranker",
        type=Path,
        metavar="DIR",
        help="a learned re-ranker of this checkpoint (retrieval reranker): prints test with it and without it",
    )
    parser.add_argument(
        "--grid-queries", choices=GRID_MODES, default="worst", help="which queries --grid draws (default: worst)"
    )
    parser.add_argument("--grid-rows", type=_positive_int, default=8, metavar="N", help="queries in the grid")
    parser.add_argument(
        "--classification",
        type=Path,
        metavar="DIR",
        help="closed-set data: score the proxy classifier (PR curves, confusion, ECE, Brier) into DIR",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="closed-set data: fit a softmax temperature on the validation split; ECE and Brier before/after",
    )
    parser.add_argument(
        "--calibration-share",
        type=_share,
        default=1.0,
        metavar="F",
        help="share of the validation split used to fit the temperature (default: 1, all of it)",
    )
    parser.add_argument(
        "--verification",
        action="store_true",
        help="pair-level verification: ROC AUC, and FNMR at FMR 1e-2/1e-3/1e-4 with thresholds chosen on the "
        "validation split, applied once to test",
    )
    parser.add_argument(
        "--save-threshold",
        type=_fmr,
        metavar="FMR",
        help="store the threshold of this false match rate (e.g. 1e-3; implies --verification) in the checkpoint; "
        "`index build` copies it, `index query --min-score stored` uses it",
    )
    parser.add_argument(
        "--exclude-leaks",
        action="store_true",
        help="score without the test images that copy a train/val image (re-encoded, resized, cropped, recoloured) "
        "by retrieval audit's copy check; identical files are always checked, with a warning",
    )
    parser.add_argument(
        "--leak-ratio",
        type=distance_ratio,
        metavar="R",
        help="distance ratio at which --exclude-leaks counts a test image as a copy (default: 0.5, as retrieval audit)",
    )


def run(args: argparse.Namespace) -> int:
    """Score the model; a missing checkpoint or a config typo fails before PyTorch loads.

    The folders of `--per-query` and `--grid` are made first, so that one that cannot be made fails
    before the images are embedded.
    """
    from retrieval.config import check_config
    from retrieval.evaluate.run import EvaluationRequest, run_evaluation

    if args.checkpoint is not None:
        existing_checkpoint(args.checkpoint)
    check_config(args.config, args.overrides)
    request = EvaluationRequest(
        checkpoint=args.checkpoint,
        backbone=args.backbone,
        weights=args.weights,
        config=args.config,
        overrides=tuple(args.overrides),
        per_query=None if args.per_query is None else with_folder(args.per_query),
        rerank=args.rerank,
        reranker=args.reranker,
        classification=args.classification,
        calibrate=args.calibrate,
        calibration_share=args.calibration_share,
        verification=args.verification,
        save_threshold=args.save_threshold,
        exclude_leaks=args.exclude_leaks,
        leak_ratio=args.leak_ratio,
        grid=None if args.grid is None else with_folder(args.grid),
        grid_queries=args.grid_queries,
        grid_rows=args.grid_rows,
    )
    with showing_progress("evaluate"):  # in a log, where no bar shows, a line every so often while embedding
        report = run_evaluation(request)
    if report.leak_warning:
        print(report.leak_warning, file=sys.stderr)
    if args.json:
        write_text(with_folder(args.json), report.record().json_text())
    print(report.text())
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _fmr(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"a false match rate must lie in (0, 1), like 1e-3, got {value}")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {value}")
    return value
