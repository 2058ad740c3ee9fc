"""`retrieval` entry point: subcommands, and one-line errors with exit code 2 for user mistakes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from retrieval import __version__
from retrieval.cli import (
    audit,
    compare,
    data,
    embed,
    evaluate,
    export,
    index,
    pretrain,
    reranker,
    serve,
    sweep,
    train,
)
from retrieval.errors import UserError

__all__ = ["main"]

_COMMANDS = {
    "train": train,
    "pretrain": pretrain,
    "evaluate": evaluate,
    "embed": embed,
    "export": export,
    "reranker": reranker,
    "sweep": sweep,
    "compare": compare,
    "data": data,
    "index": index,
    "serve": serve,
    "audit": audit,
}

# Import names of the packages an extra installs, and what it is called: a command that needs one that is
# missing (`train` without torch, `serve` without the web stack) says which extra to install.
_EXTRAS = {
    **dict.fromkeys(
        ("torch", "torchvision", "timm", "pytorch_metric_learning", "sklearn", "scipy", "matplotlib", "safetensors"),
        ("training", "train"),
    ),
    **dict.fromkeys(("fastapi", "starlette", "uvicorn", "multipart", "python_multipart"), ("serving", "serve")),
    **dict.fromkeys(("cleanlab", "datasets"), ("audit", "audit")),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retrieval", description="Train image embedders, measure Recall@K, search with FAISS."
    )
    parser.add_argument("--version", action="version", version=f"retrieval {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMANDS.values():
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; a `UserError` prints `error: ...` on one line and returns 2.

    So does a command that needs an extra this install lacks (`retrieval train` without torch): the
    line names the extra. Set `RETRIEVAL_DEBUG=1` to see the traceback of either.
    """
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command].run(args)
    except UserError as exc:
        if os.environ.get("RETRIEVAL_DEBUG"):
            raise
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None or os.environ.get("RETRIEVAL_DEBUG"):
            raise
        what, name = extra
        print(
            f"error: {_command_line(args)} needs the {what} dependencies: pip install 'retrieval[{name}]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _command_line(args: argparse.Namespace) -> str:
    """`retrieval train`, `retrieval index build`: the command that ran, for a message."""
    action = getattr(args, f"{args.command}_command", None)
    return " ".join(["retrieval", args.command, *([action] if action else [])])


def _one_line(exc: UserError) -> str:
    """The message itself, also when a DataLoader worker wrapped it in a traceback."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    last = lines[-1] if lines else exc.__class__.__name__
    return last.removeprefix(f"{UserError.__module__}.{UserError.__name__}: ")


if __name__ == "__main__":
    sys.exit(main())
