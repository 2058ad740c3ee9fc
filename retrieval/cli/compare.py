"""`retrieval compare RUN_A RUN_B`: paired difference of two runs on the same test queries, with its 95% CI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from retrieval.cli._common import output_file, with_folder
from retrieval.runtime.files import write_text

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compare",
        help="paired difference A - B of Recall@1 and MAP@R on the same test queries, with a class-bootstrap CI",
    )
    for name in ("run_a", "run_b"):
        parser.add_argument(
            name, type=Path, metavar=name.upper(), help="a run directory (its per_query.npz) or a per-query .npz file"
        )
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples (default 0)")
    parser.add_argument("--json", type=output_file, metavar="FILE", help="also write the comparison to FILE as JSON")


def run(args: argparse.Namespace) -> int:
    from retrieval.evaluate.uncertainty import (
        INTERVAL_METRICS,
        compare_runs,
        format_uncertainty,
        load_query_values,
        uncertainty_summary,
    )
    from retrieval.metrics.bootstrap import LEVEL, NUM_RESAMPLES

    a, b = load_query_values(args.run_a), load_query_values(args.run_b)
    differences = compare_runs(a, b, seed=args.seed)
    summaries = {"a": uncertainty_summary(a, args.seed), "b": uncertainty_summary(b, args.seed)}
    print(f"A = {args.run_a}: {format_uncertainty(summaries['a'])}")
    print(f"B = {args.run_b}: {format_uncertainty(summaries['b'])}")
    head = (
        f"A - B, paired on the same {len(a.rows)} queries ({LEVEL:.0%} CI, class bootstrap, "
        f"{NUM_RESAMPLES} resamples of {a.num_classes} classes)"
    )
    print(head + ":")
    for key, name in INTERVAL_METRICS.items():
        estimate, low, high = differences[key]
        verdict = "A better" if low > 0 else "B better" if high < 0 else "no difference shown (the CI contains 0)"
        print(f"  {name}: {estimate:+.4f} [{low:+.4f}, {high:+.4f}]  {verdict}")
    if args.json:
        payload = {key: summary.as_dict() for key, summary in summaries.items()}
        payload["difference"] = {key: list(value) for key, value in differences.items()}
        write_text(with_folder(args.json), json.dumps(payload, indent=2) + "\n")
    return 0
