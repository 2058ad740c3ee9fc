"""Draw the figures of a training run from its metrics.jsonl (the trainer also does this every epoch).

    python tools/plot_run.py runs/digits-anchor-20260101-120000

writes RUN_DIR/plots/curves.png (loss, learning rate, Recall@K, MAP@R, per-group results),
difficulty.png (c_i histograms and quantile bands over epochs; Anchor Loss), gating.png (b_i
histograms, median per head/mid/tail group, fraction gated; gated losses) and gradients.png
(share of the logit-gradient norm per p_t bucket and on wrong predictions).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from retrieval.errors import UserError
from retrieval.report.plots import plot_run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a directory written by `retrieval train`")
    args = parser.parse_args(argv)
    try:
        written = plot_run(args.run_dir)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
