"""Indexes built on several machines: one trained empty IVF index, a shard of the rows each, merged on disk.

FAISS's recipe for indexes larger than one machine (`faiss.contrib.ondisk`), as commands:

1. `train_index` (`retrieval index train`) trains `IVF{nlist},Flat` on a sample of all the rows
   and writes it, empty, to `TRAINED/index.faiss` with a manifest recording its sha256.
2. Each machine builds a shard (`retrieval index build --trained TRAINED --shard K/M`): a copy of
   the trained index holding its contiguous run of the inputs (`EmbeddingFiles.shard`), ids being
   the rows' numbers over the full ordered list of inputs. The shard is an ordinary index
   directory whose manifest records the trained index's sha256, its first id and `shard`: its
   number K, the count M and that list of inputs (each one's rows and content fingerprint).
3. `merge_into` (`retrieval index merge`) merges (`merge_shards`) the shards' inverted lists into one
   on-disk lists file (`on_disk.merged_lists`, FAISS's `merge_from_multiple`) and concatenates their
   metadata tables. Shards of another trained index, kind, dimension, list of inputs or count,
   whose ids overlap, or a split with shards missing, are refused: ids are row numbers over the
   inputs, so shards of inputs given in other orders would hold some rows twice and others never.

IVF-Flat only: the kind whose lists hold everything a search needs (ivfpq's re-ranking vectors
and id map are not inverted lists).
"""

from __future__ import annotations

import datetime
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import faiss
import numpy as np
import pyarrow as pa
from pydantic import ConfigDict, Field

from retrieval import __version__
from retrieval.errors import UserError
from retrieval.index.build.sample import SEED, training_rows
from retrieval.index.choice import plan_index
from retrieval.index.from_embeddings import EmbeddingFiles, check_column_types
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.manifest import FileEntry, IndexManifest, MergedShard, ShardRecord, SourceRecord
from retrieval.index.metadata import Metadata
from retrieval.index.on_disk import LISTS_FILE, merged_lists, read_with_lists_beside
from retrieval.index.search_index import SearchIndex
from retrieval.index.storage import (
    FORMAT,
    FORMAT_VERSION,
    INDEX_FILE,
    MANIFEST_FILE,
    METADATA_FILE,
    read_verified_manifest,
    working_directory,
    write_index_directory,
)
from retrieval.index.streaming import UnitChunks, gather_rows
from retrieval.runtime.files import file_sha256
from retrieval.validation import Record, ValidationError, at_least, user_error

__all__ = ["TRAINED_FORMAT", "TrainedIndex", "merge_into", "merge_shards", "read_trained", "train_index"]

TRAINED_FORMAT = "retrieval-trained-index"
_CHUNK_ROWS = 65536


class TrainedSample(Record):
    """The rows the lists were trained on: how many, out of how many, from which inputs."""

    model_config = ConfigDict(extra="allow", strict=True)

    rows: Annotated[int, at_least(1)]
    of: Annotated[int, at_least(1)]
    sources: list[SourceRecord]


class TrainedParameters(Record):
    """The IVF settings the index was trained with."""

    model_config = ConfigDict(extra="allow", strict=True)

    nlist: Annotated[int, at_least(1)]


class TrainedManifest(Record):
    """The manifest of a trained, empty index (`retrieval index train`); JSON types, read strictly."""

    model_config = ConfigDict(extra="allow", strict=True)

    format: str  # TRAINED_FORMAT
    version: int
    toolkit_version: str
    faiss_version: str
    created: str  # ISO 8601
    kind: Literal["ivf"]
    factory: str
    parameters: TrainedParameters
    dimension: Annotated[int, at_least(1)]
    trained_on: TrainedSample
    files: dict[str, FileEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class TrainedIndex:
    """A trained, empty IVF index and its manifest (`factory`, `dimension`, `parameters.nlist`, `sha256`)."""

    index: faiss.Index
    manifest: TrainedManifest

    @property
    def sha256(self) -> str:
        """The sha256 of its `index.faiss`: what shards record and `merge_shards` compares."""
        return self.manifest.files[INDEX_FILE].sha256


def train_index(files: EmbeddingFiles, out: Path, nlist: int | None = None, progress: bool = True) -> TrainedIndex:
    """Train `IVF{nlist},Flat` (default about 4·sqrt(N) lists) on a sample of `files`' rows and write it to `out`.

    The sample is the one `SearchIndex.build_streamed` takes: max(39·nlist, 262,144) rows, seed 0.

    Raises:
        UserError: fewer rows than the lists need to train.
    """
    plan = plan_index(files.rows, files.dim, "ivf", nlist=nlist)
    if files.rows < plan.min_training_vectors:
        raise UserError(
            f"{files.rows:,} rows cannot train {plan.parameters['nlist']:,} lists (39 rows a list); "
            "pass a smaller --nlist"
        )
    wanted = training_rows(files.rows, plan, np.random.default_rng(SEED))
    sample = gather_rows(UnitChunks(files.stream, _CHUNK_ROWS).read("sampling", progress), wanted, files.dim)
    index = faiss.index_factory(files.dim, plan.factory, faiss.METRIC_INNER_PRODUCT)
    index.train(sample)
    manifest = TrainedManifest(
        format=TRAINED_FORMAT,
        version=FORMAT_VERSION,
        toolkit_version=__version__,
        faiss_version=faiss.__version__,
        created=_now(),
        kind="ivf",
        factory=plan.factory,
        parameters=TrainedParameters.model_validate(plan.parameters),
        dimension=files.dim,
        trained_on=TrainedSample(rows=len(wanted), of=files.rows, sources=files.sources()),
    )
    written = write_index_directory(out, {INDEX_FILE: lambda path: faiss.write_index(index, str(path))}, manifest)
    return TrainedIndex(index, written)


def read_trained(directory: Path) -> TrainedIndex:
    """The trained index `train_index` wrote at `directory`, its file checked against the manifest's sha256.

    Raises:
        UserError: not a trained index directory, a manifest field of the wrong type (naming it), or its
            index file was changed.
    """
    path = directory / MANIFEST_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{directory} is not a trained index ({exc}); make one with `retrieval index train`") from exc
    if not isinstance(data, dict) or data.get("format") != TRAINED_FORMAT:
        raise UserError(f"{directory} is not a trained index; make one with `retrieval index train`")
    try:
        manifest = TrainedManifest.model_validate(data)
    except ValidationError as exc:
        raise user_error(TrainedManifest, exc, str(path), "the manifest is damaged: run `index train` again") from None
    expected = manifest.files[INDEX_FILE].sha256 if INDEX_FILE in manifest.files else None
    if not (directory / INDEX_FILE).is_file() or file_sha256(directory / INDEX_FILE) != expected:
        raise UserError(f"{directory / INDEX_FILE} is missing or does not match its manifest; copy TRAINED again")
    return TrainedIndex(faiss.read_index(str(directory / INDEX_FILE)), manifest)


def merge_into(shards: list[Path], out: Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> SearchIndex:
    """The shards merged (`merge_shards`) and saved as the index directory `out`, whole or not at all.

    The lists are merged in a working directory beside `out` (removed after the save; after a kill, by
    the next save beside it), and saved under `out`'s writer lock.

    Raises:
        UserError: see `merge_shards`; `out`'s lock is held longer than `lock_timeout` seconds.
    """
    work = working_directory(out)
    try:
        index = merge_shards(shards, work)
        with writer_lock(out, lock_timeout):
            index.save(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return index


def merge_shards(shards: list[Path], work: Path) -> SearchIndex:
    """One index of the shards' vectors and metadata; its inverted lists are merged into `work/lists.ivfdata`.

    `save` links that file into the index directory (atomically, as every save); the index is read-only.

    Raises:
        UserError: a shard is not a shard (built without `--trained`), the shards differ in trained
            index, kind or dimension, their ids overlap, a shard's manifest does not fit its ids or its
            contents (an edited manifest), or a metadata column has types that do not join.
    """
    manifests = [read_verified_manifest(shard) for shard in shards]
    records = _check_compatible(shards, manifests)
    order = sorted(range(len(shards)), key=lambda i: manifests[i].first_id or 0)
    shards, manifests = [shards[i] for i in order], [manifests[i] for i in order]
    for number in range(1, len(shards)):
        if (manifests[number].first_id or 0) < manifests[number - 1].next_id:
            raise UserError(
                f"{shards[number - 1]} and {shards[number]} hold overlapping ids: merge each shard of one split once"
            )
    _check_complete(records)
    indexes = [_read_shard(shard, manifest) for shard, manifest in zip(shards, manifests, strict=True)]
    tables = [Metadata.read(shard / METADATA_FILE).table for shard in shards]
    for shard, manifest, index, table in zip(shards, manifests, indexes, tables, strict=True):
        _check_stored(shard, manifest, int(index.ntotal), table.num_rows)
    check_column_types(  # shard builds check their inputs; these could be of another version, or edited
        [(str(shard), table.schema) for shard, table in zip(shards, tables, strict=True)],
        "build every shard again from embedding files with one column type each",
    )
    merged = merged_lists(
        _empty_copy(indexes[0]), [faiss.extract_index_ivf(i).invlists for i in indexes], work / LISTS_FILE
    )
    del indexes
    metadata = Metadata(pa.concat_tables(tables, promote_options="permissive"))
    return SearchIndex(merged, metadata, _merged_manifest(shards, manifests, int(merged.ntotal)), read_only=True)


def _check_compatible(shards: list[Path], manifests: list[IndexManifest]) -> list[ShardRecord]:
    """Refuse, in one line, shards that were not built from one trained index with the same kind and dimension.

    Returns:
        Each shard's `shard` record (number, count, inputs), in the order of `shards`.
    """
    first = manifests[0]
    records = []
    for shard, manifest in zip(shards, manifests, strict=True):
        if manifest.trained is None:
            raise UserError(f"{shard} is not a shard: build shards with `index build --trained TRAINED --shard K/M`")
        for field, what in (("kind", "kind"), ("dimension", "dimension"), ("trained", "trained index (sha256)")):
            if getattr(manifest, field) != getattr(first, field):
                raise UserError(
                    f"{shard} has another {what} than {shards[0]}: "
                    f"{getattr(manifest, field)!r} vs {getattr(first, field)!r}; merge shards built with one TRAINED"
                )
        if manifest.model != first.model:
            raise UserError(f"{shard} was embedded by another model than {shards[0]}; merge one model's shards")
        if manifest.removed_ids:
            raise UserError(f"{shard} has removed ids; build the shard again from its embedding files")
        _check_id_range(shard, manifest)
        records.append(_shard_record(shard, manifest))
        _check_same_inputs(shard, records[-1], shards[0], _shard_record(shards[0], first))
    return records


def _check_id_range(shard: Path, manifest: IndexManifest) -> None:
    """Refuse a shard whose manifest's ids do not add up: a shard holds ids first_id .. first_id + count - 1.

    The manifest is the one file of an index its sha256 table does not cover, so a hand edit (`next_id`
    lowered) would merge into an index whose filtered searches index past its id range.
    """
    first_id = manifest.first_id or 0
    stored = manifest.count if manifest.stored is None else manifest.stored
    if manifest.next_id != first_id + manifest.count or stored != manifest.count:
        raise UserError(
            f"{shard / MANIFEST_FILE}: next_id {manifest.next_id}, count {manifest.count} and stored {stored} do not "
            f"fit a shard of ids {first_id}.. (next_id = first_id + count = stored + first_id); the manifest was "
            "edited: build the shard again"
        )


def _check_stored(shard: Path, manifest: IndexManifest, vectors: int, rows: int) -> None:
    """Refuse a shard whose index or metadata holds another number of items than its manifest's `count`."""
    if vectors != manifest.count or rows != manifest.count:
        raise UserError(
            f"{shard} holds {vectors} vectors and {rows} metadata rows, its manifest's count is {manifest.count}; "
            "the manifest was edited: build the shard again"
        )


def _shard_record(shard: Path, manifest: IndexManifest) -> ShardRecord:
    """The manifest's `shard` (number, count, inputs; its types checked when the manifest was read)."""
    if manifest.merged_from is not None:
        raise UserError(f"{shard} is a merged index, not a shard; merge the shards it was merged from")
    record = manifest.shard
    if record is None:
        raise UserError(
            f"{shard} does not record the inputs it was built from (an older or edited shard); "
            "build it again with `index build --trained TRAINED --shard K/M`"
        )
    return record


def _check_same_inputs(shard: Path, record: ShardRecord, first: Path, first_record: ShardRecord) -> None:
    """Refuse, naming the first difference, a shard built from another list of inputs or split into another count."""
    theirs, ours = first_record.inputs, record.inputs
    for number, (want, got) in enumerate(zip(theirs, ours, strict=False)):
        if (want.rows, want.fingerprint) != (got.rows, got.fingerprint):
            raise UserError(
                f"{shard} was built from other inputs than {first}: its input {number + 1} is {got.path} "
                f"({got.rows:,} rows), {first}'s is {want.path} ({want.rows:,} rows); "
                "build every shard from the same --embeddings list, in the same order"
            )
    if len(theirs) != len(ours):
        raise UserError(
            f"{shard} was built from {len(ours)} inputs, {first} from {len(theirs)}; "
            "build every shard from the same --embeddings list, in the same order"
        )
    if record.count != first_record.count:
        raise UserError(
            f"{shard} is shard {record.number}/{record.count}, {first} is shard "
            f"{first_record.number}/{first_record.count}; merge the M shards of one split"
        )


def _check_complete(records: list[ShardRecord]) -> None:
    """Refuse a merge that misses shards of the split: its rows would be missing from the index without a word."""
    count = records[0].count
    missing = sorted(set(range(count)) - {record.number for record in records})
    if missing:
        shown = ", ".join(f"{number}/{count}" for number in missing[:8]) + (", ..." if len(missing) > 8 else "")
        raise UserError(f"shard {shown} of the split is missing; merge all {count} shards")


def _read_shard(shard: Path, manifest: IndexManifest) -> faiss.Index:
    """The shard's FAISS index, its lists memory-mapped (on-disk lists beside it, or those inside index.faiss)."""
    if LISTS_FILE in manifest.files:
        return read_with_lists_beside(shard / INDEX_FILE)
    return faiss.read_index(str(shard / INDEX_FILE), faiss.IO_FLAG_MMAP)


def _empty_copy(index: faiss.Index) -> faiss.Index:
    """An empty IVF-Flat index with the same coarse quantizer (its centroids copied) as `index`."""
    ivf = faiss.extract_index_ivf(index)
    empty = faiss.IndexIVFFlat(faiss.IndexFlatIP(ivf.d), ivf.d, ivf.nlist, faiss.METRIC_INNER_PRODUCT)
    empty.quantizer.add(ivf.quantizer.reconstruct_n(0, ivf.nlist))
    empty.is_trained = True
    return empty


def _merged_manifest(shards: list[Path], manifests: list[IndexManifest], stored: int) -> IndexManifest:
    """The merged index's manifest: the shards' shape and settings, their counts and sources added up."""
    first = manifests[0]
    kept = ("kind", "requested_kind", "factory", "parameters", "dimension", "metric", "normalized", "trained")
    start = first.first_id or 0
    return IndexManifest.model_validate(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "toolkit_version": __version__,
            "faiss_version": faiss.__version__,
            "created": _now(),
            **{field: getattr(first, field) for field in kept},
            "max_memory": None,
            "inputs_were_normalized": all(bool(manifest.inputs_were_normalized) for manifest in manifests),
            "count": sum(manifest.count for manifest in manifests),
            "stored": stored,
            "next_id": manifests[-1].next_id,
            **({"first_id": start} if start else {}),
            "removed_ids": [],
            "search_parameters": first.search_parameters,
            "target_recall": None,
            "target_recall_source": None,
            "measured": {},
            "model": first.model.record(),
            "match_threshold": None,
            "sources": [
                source.model_dump(exclude_unset=True) for manifest in manifests for source in manifest.sources or []
            ],
            "merged_from": [
                MergedShard(path=str(shard), first_id=manifest.first_id or 0, count=manifest.count).model_dump()
                for shard, manifest in zip(shards, manifests, strict=True)
            ],
        }
    )


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
