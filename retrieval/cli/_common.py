"""Arguments shared by the subcommands."""

from __future__ import annotations

import argparse

__all__ = ["add_config_arguments"]


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`--config FILE.yaml` and repeatable `--set key.sub=value`."""
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML config (default: the embedded digits demo)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set train.epochs=5 (repeatable)",
    )
