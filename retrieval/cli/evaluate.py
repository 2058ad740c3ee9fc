"""`retrieval evaluate`: Recall@K / MAP@R of a checkpoint on the test split of its (or another) dataset."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from retrieval.cli._common import add_config_arguments
from retrieval.config import apply_overrides, config_from_dict, load_config
from retrieval.data import build_data
from retrieval.engine.checkpoint import load_checkpoint, restore_embedder
from retrieval.engine.device import amp_dtype, place_model, resolve_device, uses_channels_last
from retrieval.engine.evaluate import KS, format_metrics, score_model
from retrieval.engine.uncertainty import QueryValues, format_uncertainty, save_query_values, uncertainty_summary

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("evaluate", help="measure Recall@K and MAP@R of a checkpoint")
    parser.add_argument("--checkpoint", type=Path, required=True, metavar="CKPT", help="a run's checkpoints/best.pt")
    add_config_arguments(parser)
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="also write the metrics and their 95%% intervals to FILE as JSON"
    )
    parser.add_argument(
        "--per-query",
        type=Path,
        metavar="FILE.npz",
        help="also write every query's Recall@1 and AP@R to FILE.npz, for `retrieval compare`",
    )


def run(args: argparse.Namespace) -> int:
    checkpoint = load_checkpoint(args.checkpoint)
    if args.config:
        config = load_config(args.config, args.overrides)
    else:
        config = config_from_dict(apply_overrides(checkpoint["config"], args.overrides))
    model = restore_embedder(checkpoint)
    device = resolve_device(config.train.device)
    channels_last = uses_channels_last(config.train.channels_last, device)
    model = place_model(model, device, channels_last)
    data = build_data(
        config.data, model.data_config(), config.augment, checkpoint["manifest"]["model_config"]["in_chans"]
    )
    scores = score_model(
        model,
        data.test,
        config.data.eval_batch_size,
        device,
        num_workers=config.data.num_workers,
        amp_dtype=amp_dtype(config.train.amp, device),
        channels_last=channels_last,
    )
    metrics = scores.summary(KS)
    values = QueryValues.from_scores(scores)
    uncertainty = uncertainty_summary(values)
    if args.per_query:
        save_query_values(args.per_query, values)
    if args.json:
        args.json.write_text(json.dumps({**metrics, "uncertainty": uncertainty}, indent=2) + "\n")
    print(format_uncertainty(uncertainty))
    print(format_metrics(metrics))
    return 0
