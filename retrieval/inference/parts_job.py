"""`retrieval embed --out DIR/` in one process or many (torchrun): each process embeds and writes its share of parts.

Rank r of W takes the parts p with `p % W == r` (round-robin, so processes finish together), in
the layout of `retrieval.embedding_files.parts_layout`. A finished part (its `.json` exists and
matches its parquet's sha256) is skipped, so rerunning the same command after a crash resumes the
job, with the same or another number of processes. When every process is done (a barrier), rank 0
writes `_SUCCESS`. Processes on several machines need DIR on a shared file system.

For tests: `RETRIEVAL_EMBED_KILL_AFTER_PARTS=K` makes a process kill itself (SIGKILL, as a crash or a
preempted machine would) right after writing its K-th part.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import torch
from tqdm import tqdm

from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.embedding_files.parts_layout import EmbedJob, finish_parts, part_finished, start_parts, write_part
from retrieval.errors import UserError
from retrieval.inference.image_encoder import ImageEncoder
from retrieval.inference.sources import ImageSource, report_unreadable
from retrieval.runtime.distributed import DistributedContext

__all__ = ["KILL_AFTER_PARTS", "PartsSummary", "embed_in_parts"]

KILL_AFTER_PARTS = "RETRIEVAL_EMBED_KILL_AFTER_PARTS"
_T = TypeVar("_T")


@dataclass(frozen=True)
class PartsSummary:
    """What a parts directory holds once `embed_in_parts` returns, and how much of it this run embedded."""

    rows: int  # embeddings over all parts
    dim: int  # embedding dimension D
    parts: int  # parts in the directory
    embedded: int  # parts embedded by this run (the others were finished by an earlier one)
    skipped: int  # unreadable images left out, over all parts


def embed_in_parts(
    encoder: ImageEncoder,
    source: ImageSource,
    directory: Path,
    part_rows: int,
    batch_size: int,
    num_workers: int,
    context: DistributedContext,
    spec: ImageSourceSpec,
) -> PartsSummary:
    """Embed this rank's unfinished parts of `source` into `directory`; rank 0 writes `_SUCCESS` after all ranks.

    Args:
        encoder: the checkpoint's encoder on this process's device.
        source: the images in their documented order (every rank reads the same list).
        directory: the parts directory (created by rank 0).
        part_rows: input rows per part.
        batch_size: images per forward pass; batches start at each part's first row.
        num_workers: image decoding processes.
        context: this process's rank and the world size.
        spec: what the images are (`--csv`, `--images` or `--set`, and `--split`), recorded so that a rerun
            resumes the same job only.

    Raises:
        UserError: `directory` holds parts of another job, or no image of the source could be read.
    """
    job = EmbedJob(
        source=spec,
        checkpoint_sha256=encoder.checkpoint_sha256,
        part_rows=part_rows,
        input_rows=len(source.paths),
        dim=encoder.dim,
    )
    _on_main(context, lambda: start_parts(directory, job))
    count = -(-len(source.paths) // part_rows)
    todo = [part for part in range(context.rank, count, context.world_size) if not part_finished(directory, part)]
    kill_after = int(os.environ.get(KILL_AFTER_PARTS, "0"))
    total = sum(len(_part_rows(part, part_rows, len(source.paths))) for part in todo)
    with tqdm(total=total, desc="embed parts", unit="image", disable=None if context.is_main else True) as bar:
        for done, part in enumerate(todo, start=1):
            rows = _part_rows(part, part_rows, len(source.paths))
            _embed_part(encoder, source, directory, part, rows, batch_size, num_workers, context)
            bar.update(len(rows))
            if done == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
    context.barrier()
    embedded = int(context.sum(torch.tensor(len(todo), device=encoder.device)).item())
    success = _on_main(context, lambda: finish_parts(directory, job))
    return PartsSummary(success.rows, success.dim, count, embedded, success.skipped)


def _part_rows(part: int, part_rows: int, input_rows: int) -> range:
    """The input rows of part `part`."""
    return range(part * part_rows, min((part + 1) * part_rows, input_rows))


def _embed_part(
    encoder: ImageEncoder,
    source: ImageSource,
    directory: Path,
    part: int,
    rows: range,
    batch_size: int,
    num_workers: int,
    context: DistributedContext,
) -> None:
    """Embed the images of input `rows` and write them as part `part`; unreadable ones are reported and left out."""
    embedded = encoder.embed_files(source.paths[rows.start : rows.stop], batch_size, num_workers, context.is_main)
    report_unreadable(embedded.failures)
    columns = source.rows(embedded.positions + rows.start)
    write_part(directory, part, rows.start, embedded.embeddings, columns, len(embedded.failures))


def _on_main(context: DistributedContext, step: Callable[[], _T]) -> _T:
    """Run `step` on rank 0 and give its result to every rank; a `UserError` it raises is raised on every rank."""
    outcome: tuple[_T | None, str | None] = (None, None)
    if context.is_main:
        try:
            outcome = (step(), None)
        except UserError as exc:
            outcome = (None, str(exc))
    result, error = context.broadcast(outcome)
    if error is not None:
        raise UserError(error)
    return cast(_T, result)
