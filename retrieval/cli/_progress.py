"""What a long command is doing, as it starts each stage: the library's INFO messages as lines on stdout."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["showing_progress"]


class _BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING


@contextmanager
def showing_progress(command: str) -> Iterator[logging.Logger]:
    """While the block runs, `retrieval.*` INFO messages print as `retrieval COMMAND: ...` on stdout (rank 0 only).

    They go to stdout, with the per-epoch lines they introduce, so standard error keeps holding only
    problems: a user error stays one line there. Warnings print on stderr as before. Yields the
    command's own logger for its first lines.
    """
    logger = logging.getLogger("retrieval")
    if os.environ.get("RANK", "0") != "0":  # under torchrun, the other processes stay quiet
        yield logging.getLogger(f"retrieval.cli.{command}")
        return
    progress = logging.StreamHandler(sys.stdout)
    progress.setFormatter(logging.Formatter(f"retrieval {command}: %(message)s"))
    progress.addFilter(_BelowWarning())
    problems = logging.StreamHandler(sys.stderr)
    problems.setLevel(logging.WARNING)
    level = logger.level
    logger.addHandler(progress)
    logger.addHandler(problems)
    logger.setLevel(logging.INFO)
    try:
        yield logging.getLogger(f"retrieval.cli.{command}")
    finally:
        logger.removeHandler(progress)
        logger.removeHandler(problems)
        logger.setLevel(level)
