"""Arguments shared by the subcommands."""

from __future__ import annotations

import argparse

__all__ = ["add_config_arguments", "seed_list"]


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


def seed_list(text: str) -> list[int]:
    """`--seeds 0,1,2` -> [0, 1, 2]: distinct integers >= 0."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes comma-separated integers like 0,1,2, got {text!r}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds takes distinct integers >= 0 like 0,1,2, got {text!r}")
    return seeds
