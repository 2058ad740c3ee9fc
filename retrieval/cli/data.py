"""`retrieval data longtail`: dataset CSV tools."""

from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.errors import UserError
from retrieval.runtime.directories import refuse_file_in_the_way

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("data", help="dataset CSV tools (long-tailed training sets)")
    actions = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    longtail = actions.add_parser(
        "longtail",
        help="write a CSV whose training classes follow n_c = n_max * ratio^(-c/(C-1)); val/test untouched",
    )
    longtail.add_argument("--csv", type=Path, required=True, metavar="IN", help="dataset CSV (path,label,split)")
    longtail.add_argument("--out", type=Path, required=True, metavar="OUT", help="CSV to write")
    longtail.add_argument(
        "--imbalance", type=float, required=True, metavar="RATIO", help="largest / smallest class size, >= 1"
    )
    longtail.add_argument("--seed", type=int, default=0, help="seeds the images kept (default 0)")


def run(args: argparse.Namespace) -> int:
    refuse_file_in_the_way(args.out.parent, f"--out {args.out}: its folder {args.out.parent}")
    from retrieval.data.longtail import make_longtail_csv

    if args.csv.resolve() == args.out.resolve():
        raise UserError(f"--out {args.out} is the input CSV; write the long-tailed copy to another file")
    summary = make_longtail_csv(args.csv, args.out, args.imbalance, args.seed)
    print(f"wrote {args.out}: {summary.describe()}")
    return 0
