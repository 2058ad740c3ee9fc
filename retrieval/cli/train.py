"""`retrieval train`: train an embedder and print its test Recall@K."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from retrieval.cli._common import add_config_arguments
from retrieval.config import Config, apply_overrides, config_from_dict, load_config
from retrieval.engine.checkpoint import load_checkpoint
from retrieval.engine.evaluate import format_metrics
from retrieval.engine.trainer import Trainer

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("train", help="train an embedder (no arguments: the embedded digits demo)")
    add_config_arguments(parser)
    parser.add_argument("--output-dir", type=Path, help="run directory (default: runs/<data>-<loss>-<time>)")
    parser.add_argument(
        "--resume", type=Path, metavar="CKPT", help="continue a run from its checkpoints/last.pt (same run directory)"
    )


def run(args: argparse.Namespace) -> int:
    checkpoint = load_checkpoint(args.resume) if args.resume else None
    config = _resume_config(args, checkpoint) if checkpoint else load_config(args.config, args.overrides)
    run_dir = args.output_dir or _default_run_dir(config, args.resume)
    trainer = Trainer(config, run_dir)
    if checkpoint:
        trainer.resume(checkpoint)
    metrics = trainer.fit()
    print(f"run directory: {run_dir}  (best Recall@1 at epoch {metrics['epoch']}: checkpoints/best.pt)")
    print(format_metrics(metrics))
    return 0


def _resume_config(args: argparse.Namespace, checkpoint: dict[str, Any]) -> Config:
    """A resumed run keeps its own config unless --config is given; --set still applies (e.g. more epochs)."""
    if args.config:
        return load_config(args.config, args.overrides)
    return config_from_dict(apply_overrides(checkpoint["config"], args.overrides))


def _default_run_dir(config: Config, resume: Path | None) -> Path:
    if resume is not None:
        return resume.resolve().parent.parent
    return Path("runs") / f"{config.data.name}-{config.loss.name}-{time.strftime('%Y%m%d-%H%M%S')}"
