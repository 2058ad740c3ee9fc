"""`retrieval index build|query|add|remove|compact|eval|export|train|merge`: a FAISS index of a gallery.

One module a subcommand (`index_build`, `index_query`, `index_add`, `index_remove`, `index_compact`,
`index_eval`, `index_export`, `index_train`, `index_merge`); this one registers them.

The index records the checkpoint that embedded it (path and sha256), so `query` and `add` embed
new images with the same model and transform without being told; a `--checkpoint` given to them
must be that same file. An index built from an export (`--model DIR`, `retrieval export`) records
the sha256 of its model.onnx instead and embeds with onnxruntime (`OnnxEncoder`).

Writers (`build --out` over an index, `add`, `remove`) take the index's writer lock
(`retrieval.index.locking`) from load to save, so concurrent ones all take effect; a second
writer waits up to `--lock-timeout` seconds. `add` embeds its images before taking the lock,
so a long embedding does not hold other writers up. A write that fails (read-only folder, no
permission, disk full) is one line and leaves the previous index as it was.
"""

from __future__ import annotations

import argparse

from retrieval.cli import (
    index_add,
    index_build,
    index_compact,
    index_eval,
    index_export,
    index_merge,
    index_query,
    index_remove,
    index_train,
)

__all__ = ["add_parser", "run"]

_SUBCOMMANDS = {
    "build": index_build,
    "query": index_query,
    "add": index_add,
    "remove": index_remove,
    "compact": index_compact,
    "eval": index_eval,
    "export": index_export,
    "train": index_train,
    "merge": index_merge,
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("index", help="build, query, update and measure a FAISS index of a checkpoint")
    actions = parser.add_subparsers(dest="index_command", required=True, metavar="ACTION")
    for module in _SUBCOMMANDS.values():
        module.add_parser(actions)


def run(args: argparse.Namespace) -> int:
    return _SUBCOMMANDS[args.index_command].run(args)
