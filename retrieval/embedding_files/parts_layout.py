"""Embeddings in parts (`retrieval embed --out DIR/`): the directory layout, writing one part, reading them back.

```
DIR/
  _job.json            what the parts are of: source, checkpoint sha256, part_rows, input_rows, dim
  part-00000.parquet   the readable images of input rows [0, part_rows), columns of a one-file `.parquet`
  part-00000.json      {"part": 0, "first_row": 0, "rows": n, "sha256": <of the parquet>, "dim": D, "skipped": k}
  part-00001.parquet ...
  _SUCCESS             {"rows": N, "dim": D, "parts": [...], "source": ..., "checkpoint_sha256": ..., ...}
```

Part p holds input rows `[p * part_rows, (p + 1) * part_rows)` in the source's order (CSV row
order, the sorted file list of a folder, a dataset's split order), so the parts hold the same rows
and, to float32 rounding, the same vectors however many processes wrote them. `first_row` is the part's first input row;
`rows` the rows it holds (fewer than the input rows it covers when images were unreadable:
`skipped`). A part's parquet is written atomically and its `.json` after it, so a part whose
`.json` exists and whose sha256 matches is finished; `_SUCCESS` is written last, when every part
is. The three records are pydantic models (`EmbedJob`, `PartRecord`, `EmbedSuccess`), checked when
read back. Readers here use numpy and pyarrow only (no torch), so index builds can stream parts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypeVar

import numpy as np
import pyarrow as pa

from retrieval.core.image_source_spec import ImageSourceSpec
from retrieval.embedding_files.file_formats import read_embeddings, write_embeddings
from retrieval.errors import UserError
from retrieval.runtime.files import file_sha256, write_text
from retrieval.validation import Record, ValidationError, at_least, user_error

__all__ = [
    "JOB_FILE",
    "SUCCESS_FILE",
    "EmbedJob",
    "EmbedSuccess",
    "PartRecord",
    "finish_parts",
    "iter_embedding_parts",
    "part_finished",
    "part_path",
    "read_embedding_parts",
    "read_part_record",
    "read_success",
    "start_parts",
    "write_part",
]

SUCCESS_FILE = "_SUCCESS"
JOB_FILE = "_job.json"
_REWRITE = "rerun the same embed command to rewrite it"


class EmbedJob(Record):
    """What the parts of a directory are of (`_job.json`); a rerun resumes the same job only."""

    source: ImageSourceSpec  # what the images are: `--csv`, `--images` or `--set`, and `--split`
    checkpoint_sha256: str | None  # the model's file (a backbone without training: its weights' checksum)
    part_rows: Annotated[int, at_least(1)]  # input rows per part
    input_rows: Annotated[int, at_least(0)]  # rows of the source, readable or not
    dim: Annotated[int, at_least(1)]  # D


class PartRecord(Record):
    """The `.json` beside a part's parquet, written after it: the part is finished when its sha256 matches."""

    part: int
    first_row: int  # the input row the part starts at
    rows: int  # rows it holds: its readable images
    sha256: str  # of the parquet file
    dim: int
    skipped: int = 0  # its input rows that could not be read


class EmbedSuccess(Record):
    """`_SUCCESS`, written once every part is: what the parts hold together, and the job they are of."""

    rows: int
    dim: int
    parts: list[str]  # the parquet files, in input order
    checkpoint_sha256: str | None = None
    source: ImageSourceSpec | None = None
    part_rows: int | None = None
    input_rows: int | None = None
    skipped: int = 0


_Record = TypeVar("_Record", bound=Record)


def part_path(directory: Path, part: int) -> Path:
    """The parquet file of part `part` (`part-00007.parquet`)."""
    return directory / f"part-{part:05d}.parquet"


def start_parts(directory: Path, job: EmbedJob) -> None:
    """Record `job` in `directory/_job.json`, or check that the parts already there are of the same job.

    Resuming a job also deletes the temporary files of parts a killed process was writing (called
    before any process of this run writes a part).

    Raises:
        UserError: `directory` holds parts of another job (other images, checkpoint or part size),
            which must not be mixed with this one's.
    """
    recorded_path = directory / JOB_FILE
    if recorded_path.is_file():
        recorded = json.loads(recorded_path.read_text(encoding="utf-8"))
        wanted = job.model_dump(exclude_unset=True)  # the source's keys as the command line gave them
        changed = [key for key in sorted({*recorded, *wanted}) if recorded.get(key) != wanted.get(key)]
        if changed:
            raise UserError(
                f"{directory} holds the parts of another embed job (its {', '.join(changed)} differ); "
                "pass a new --out DIR/ or delete this one"
            )
        for unfinished in directory.glob(".part-*.tmp"):  # `atomic_write`'s names
            unfinished.unlink(missing_ok=True)
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_text(recorded_path, job.model_dump_json(indent=2, exclude_unset=True) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write {directory}: {exc.strerror}; choose another --out DIR/") from exc


def part_finished(directory: Path, part: int) -> bool:
    """Whether part `part` was written whole: its `.json` exists and names the sha256 of its parquet.

    A damaged `.json` counts as unfinished, so the rerun the readers ask for writes the part again.
    """
    path = part_path(directory, part)
    try:
        manifest = _read_manifest(path)
    except UserError:
        return False
    return manifest is not None and path.is_file() and file_sha256(path) == manifest.sha256


def write_part(
    directory: Path,
    part: int,
    first_row: int,
    embeddings: np.ndarray,
    columns: pa.Table,
    skipped: int,
) -> None:
    """Write part `part`: its parquet (atomically), then its `.json` with the parquet's sha256.

    Args:
        directory: the parts directory.
        part: the part number.
        first_row: the input row the part starts at.
        embeddings: `(n, D)` embeddings of the part's readable images.
        columns: `path`, `label` and extra metadata columns, n rows typed as the whole source is (so every
            part has the same types).
        skipped: how many of the part's input rows could not be read.
    """
    path = part_path(directory, part)
    extra = {name: columns[name] for name in columns.column_names if name not in ("path", "label")}
    write_embeddings(path, embeddings, columns["path"], columns["label"], extra)
    manifest = PartRecord(
        part=part,
        first_row=first_row,
        rows=len(embeddings),
        sha256=file_sha256(path),
        dim=int(embeddings.shape[1]),
        skipped=skipped,
    )
    write_text(path.with_suffix(".json"), manifest.model_dump_json() + "\n")


def finish_parts(directory: Path, job: EmbedJob) -> EmbedSuccess:
    """Write `_SUCCESS` once every part of `job` has its `.json`; return what it records.

    Raises:
        UserError: a part has no `.json` (a process failed before writing it, or wrote it where this
            one cannot see it), or no part holds a row.
    """
    count = -(-job.input_rows // job.part_rows)
    manifests = [_read_manifest(part_path(directory, part)) for part in range(count)]
    missing = [part for part, manifest in enumerate(manifests) if manifest is None]
    if missing:
        raise UserError(
            f"embedding {directory} is incomplete: part {missing[0]} is not there (processes on several "
            "machines need DIR on a shared file system); rerun the same embed command to resume it"
        )
    written = [manifest for manifest in manifests if manifest is not None]
    if not any(manifest.rows for manifest in written):
        raise UserError(f"none of the {job.input_rows} images could be read; check the files")
    success = EmbedSuccess(
        rows=sum(manifest.rows for manifest in written),
        dim=job.dim,
        parts=[part_path(directory, part).name for part in range(count)],
        source=job.source,
        checkpoint_sha256=job.checkpoint_sha256,
        part_rows=job.part_rows,
        input_rows=job.input_rows,
        skipped=sum(manifest.skipped for manifest in written),
    )
    write_text(directory / SUCCESS_FILE, success.model_dump_json(indent=2, exclude_unset=True) + "\n")
    return success


def iter_embedding_parts(directory: str | Path) -> Iterator[dict[str, np.ndarray]]:
    """Each part's `{"embeddings": (n, D), "ids": (n,), "labels": (n,), extras...}` in order, one at a time.

    Every part's sha256 is checked against its `.json` before it is read.

    Raises:
        UserError: `directory` has no `_SUCCESS` (the embed job did not finish), or a part's bytes
            are not the ones its `.json` records.
    """
    directory = Path(directory)
    for name in read_success(directory).parts:
        path = directory / name
        manifest = _read_manifest(path)
        if manifest is None or not path.is_file() or file_sha256(path) != manifest.sha256:
            raise UserError(
                f"embedding part {path} is missing or does not match its .json (sha256); "
                "rerun the same embed command to rewrite it"
            )
        yield read_embeddings(path)


def read_embedding_parts(directory: str | Path) -> dict[str, np.ndarray]:
    """All parts at once: the same keys as `read_embeddings` of a one-file output, rows in input order.

    Raises:
        UserError: as `iter_embedding_parts`.
    """
    parts = list(iter_embedding_parts(directory))
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def read_success(directory: str | Path) -> EmbedSuccess:
    """The `_SUCCESS` record of a finished parts directory (rows, dim, parts, checkpoint_sha256, ...), checked.

    Raises:
        UserError: `directory` is missing, has no `_SUCCESS` (the embed job did not finish), or a
            damaged one.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"embedding directory not found: {directory}; pass the --out DIR/ of retrieval embed")
    path = directory / SUCCESS_FILE
    if not path.is_file():
        raise UserError(f"embedding {directory} is incomplete: rerun the same embed command to resume it")
    return _read_record(EmbedSuccess, path)


def read_part_record(part: Path) -> PartRecord:
    """The `.json` of the parquet part `part` (its rows and sha256).

    Raises:
        UserError: the `.json` is missing or damaged.
    """
    record = _read_manifest(part)
    if record is None:
        raise UserError(f"embedding part {part} has no .json; rerun the same embed command to rewrite it")
    return record


def _read_manifest(part: Path) -> PartRecord | None:
    """The `.json` beside the parquet file `part`, or None when it has not been written."""
    path = part.with_suffix(".json")
    return _read_record(PartRecord, path) if path.is_file() else None


def _read_record(model: type[_Record], path: Path) -> _Record:
    """The record `model` in JSON file `path`; damage (not JSON, a key missing or of the wrong type) is one line."""
    try:
        return model.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise user_error(model, exc, str(path), _REWRITE) from None
