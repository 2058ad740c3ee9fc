"""`retrieval sweep`: train a config over a grid of settings and seeds; write sweep.csv, sweep.md, sweep.png."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from retrieval.cli._common import add_config_arguments, seed_list
from retrieval.errors import UserError
from retrieval.runtime.directories import refuse_file_in_the_way

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sweep",
        help="train over a grid of settings x seeds (selection on validation); resumable; writes sweep.csv/.md/.png",
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a config key and its values, e.g. loss.gamma=0,0.5,1,2,3 (repeatable: the cartesian product)",
    )
    parser.add_argument("--seeds", type=seed_list, metavar="0,1,2", help="train every cell once per seed")
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells trained at once (set train.threads so jobs x threads fits the CPU)"
    )
    parser.add_argument("--output-dir", type=Path, help="sweep directory (default: runs/sweep-<time>)")
    parser.add_argument(
        "--report-only", action="store_true", help="train nothing: write the reports from the runs finished so far"
    )


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}")
    if args.output_dir is not None:
        refuse_file_in_the_way(args.output_dir, f"--output-dir {args.output_dir}")
    from retrieval.config import load_config
    from retrieval.sweep import parse_grid, plan_cells, run_cells, summarize, write_reports

    grid = parse_grid(args.grid)
    output_dir = args.output_dir or Path("runs") / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    cells = plan_cells(args.config, args.overrides, grid, args.seeds, output_dir)
    print(f"sweep of {len(cells)} runs in {output_dir}", flush=True)
    failed = []
    if not args.report_only:
        failed = run_cells(
            cells, args.config, args.overrides, args.jobs, lambda line: print(line, flush=True), sweep_dir=output_dir
        )
    summaries = summarize(cells)
    if not summaries:
        raise UserError(f"no run of the sweep finished; see the train.log files under {output_dir}")
    select_on = load_config(args.config, args.overrides).train.select_on
    for path in write_reports(summaries, output_dir, select_on):
        print(f"wrote {path}")
    if failed:
        print(f"{len(failed)} runs failed; fix the cause and run the same command again to retry only those")
        return 1
    return 0
