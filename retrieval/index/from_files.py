"""An index from the embedding files `retrieval embed` wrote, no model needed: all of them, or one shard.

The vectors are streamed (see `SearchIndex.build_streamed`): memory holds the index, FAISS's
training sample and one chunk, not the N embeddings. Ids are the rows' numbers 0..N-1 in the
order of the files given (a parts directory in part order). The manifest records the files and the
checkpoint's sha256, as the files record it or as `checkpoint` names it (for files with no room
for it: `.npy`, plain arrays); `index query` and `index add` with images then need that checkpoint.
Only the sha256 is recorded, not the path, so that shards built on machines that mount the
checkpoint at other places merge.

With a trained index (`retrieval.index.shards.train_index`) and a shard `(K, M)` it builds shard K
of M: this shard's rows added to a copy of the trained index, ids from the shard's first row
number over all the inputs (the same on every machine, so shards never share an id), neither tuned
nor measured (`merge_shards` joins them).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.errors import UserError
from retrieval.index.storage import working_directory
from retrieval.runtime.files import file_sha256

if TYPE_CHECKING:
    from retrieval.index.build import IndexBuildOptions
    from retrieval.index.from_embeddings import EmbeddingFiles
    from retrieval.index.manifest import ShardRecord
    from retrieval.index.search_index import SearchIndex
    from retrieval.index.shards import TrainedIndex

__all__ = ["BuiltFromFiles", "ShardInputs", "built_from_files", "shard_inputs"]


@dataclass(frozen=True)
class ShardInputs:
    """What a build from files adds: this shard's inputs (or all), its first id, the trained index.

    `record`: what the shard's manifest records as `shard` (its number, the count and every input,
    in order), for `merge_shards` to refuse shards of other inputs; None without a trained index.
    """

    files: EmbeddingFiles
    first_id: int
    trained: TrainedIndex | None
    record: ShardRecord | None


@dataclass(frozen=True)
class BuiltFromFiles:
    """An index built from embedding files: the index, how many files, and the first id (0 unless a shard)."""

    index: SearchIndex
    files: int
    first_id: int
    shard: bool


def shard_inputs(
    files: EmbeddingFiles, trained: Path | None, shard: tuple[int, int] | None, kind: str = "auto"
) -> ShardInputs:
    """Shard `shard = (K, M)` of `files` with the index trained in `trained`, or all of them without one.

    Raises:
        UserError: a shard without a trained index, more shards than rows, another `kind` than the trained
            one, or another dimension.
    """
    from retrieval.index.manifest import ShardRecord
    from retrieval.index.shards import read_trained

    if trained is None:
        if shard is not None:
            raise UserError("--shard K/M needs --trained TRAINED (index train), so that every shard has one quantizer")
        return ShardInputs(files, 0, None, None)
    index = read_trained(trained)
    if kind not in ("auto", index.manifest.kind):
        raise UserError(f"{trained} is a trained {index.manifest.kind} index; drop --type {kind}")
    if index.manifest.dimension != files.dim:
        raise UserError(
            f"{trained} was trained on {index.manifest.dimension}-d vectors, the embeddings are {files.dim}-d"
        )
    number, count = shard or (0, 1)
    if count > files.rows:  # a shard holds at least one row; a larger M would also overflow the split's arithmetic
        raise UserError(f"--shard {number}/{count}: {count} shards of {files.rows} rows; use at most one shard a row")
    record = ShardRecord(number=number, count=count, inputs=files.identity())
    mine, first_id = files.shard(number, count) if shard else (files, 0)
    return ShardInputs(mine, first_id, index, record)


@contextmanager
def built_from_files(
    paths: list[Path],
    out: Path,
    options: IndexBuildOptions,
    checkpoint: Path | None = None,
    on_disk: bool = False,
    trained: Path | None = None,
    shard: tuple[int, int] | None = None,
) -> Iterator[BuiltFromFiles]:
    """The index of the embedding files `paths`, valid until the block ends (save it to `out` inside).

    `options` says the kind, memory budget and tuning; the model, sources and working files are set
    here. `on_disk` keeps IVF-Flat's inverted lists on disk, memory-mapped (larger than RAM). The
    build's large files (those lists, ivfpq's re-ranking vectors) are written to a working directory
    beside `out`, removed when the block ends (once the index is saved, its directory holds a link to
    them). With `trained` (and `shard`), a shard of it (see `shard_inputs`).

    Raises:
        UserError: the files are unreadable (see `open_embedding_files`), `checkpoint` is not the
            checkpoint they record, or `trained` / `shard` do not fit them (see `shard_inputs`).
    """
    from retrieval.index.from_embeddings import open_embedding_files
    from retrieval.index.search_index import SearchIndex
    from retrieval.inference.interface import ModelInfo

    inputs = shard_inputs(open_embedding_files(paths), trained, shard, options.kind)
    files, first_id, trained_index = inputs.files, inputs.first_id, inputs.trained
    checkpoint_sha256 = _checkpoint_sha256(files.checkpoint_sha256, checkpoint)
    model = ModelInfo(checkpoint_sha256=checkpoint_sha256) if checkpoint_sha256 else ModelInfo()
    work = working_directory(out)
    try:
        options = dataclasses.replace(
            options, model_info=model, sources=files.sources(), on_disk=work if on_disk else None, refine_directory=work
        )
        if trained_index is not None:  # a shard is measured once merged
            kind, nlist = trained_index.manifest.kind, trained_index.manifest.parameters.nlist
            options = dataclasses.replace(
                options, kind=kind, nlist=nlist, target_recall=None, default_target_recall=None
            )
        index = SearchIndex.build_streamed(
            files.stream,
            files.metadata(),
            options,
            trained=None if trained_index is None else trained_index.index,
            first_id=first_id,
        )
        if (
            trained_index is not None
        ):  # `merge_shards` merges the shards of one trained index and one list of inputs only
            index.manifest.trained, index.manifest.shard = trained_index.sha256, inputs.record
        yield BuiltFromFiles(index, len(files.files), first_id, trained_index is not None)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _checkpoint_sha256(recorded: str | None, checkpoint: Path | None) -> str | None:
    """The sha256 of the checkpoint that made the embeddings: the files' record, or `checkpoint`'s, which must agree.

    Raises:
        UserError: `checkpoint` is missing, or is not the checkpoint the files record.
    """
    if checkpoint is None:
        return recorded
    if not checkpoint.is_file():
        raise UserError(f"checkpoint not found: {checkpoint}; pass the checkpoint that made the embeddings")
    actual = file_sha256(checkpoint)
    if recorded is not None and actual != recorded:
        raise UserError(
            f"--checkpoint {checkpoint} did not make these embeddings (sha256 {actual[:12]}... != {recorded[:12]}... "
            "recorded in the files); pass that checkpoint or leave --checkpoint out"
        )
    return actual
