"""Adding images to an index directory, from an `IndexAddRequest` to the ids added: what `retrieval index add` runs.

The images are embedded with the model the index records (or the same file given again) before the
index's writer lock is taken, so a long embedding holds no other writer up; the index is then opened
under the lock, checked to hold the same model still, and saved atomically. The columns the index has
are read as the index stores them (a string column keeps `1.10` as written), never by inference.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.errors import UserError
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT

if TYPE_CHECKING:
    import numpy as np

__all__ = ["IndexAddReport", "IndexAddRequest", "add_to_index"]


@dataclass(frozen=True)
class IndexAddRequest:
    """The flags of `retrieval index add`, by name.

    Attributes:
        index: the index directory to add to.
        csv, images, split: the images (a CSV's rows, or every image under a folder), as `index build` reads them.
        column_types: `--column-types` declarations for columns the index does not have yet.
        checkpoint, model: the model's file, when it must be named again (it must be the one the index records).
        device, batch_size, num_workers: embedding.
        lock_timeout: seconds to wait for another writer of the index.
    """

    index: Path
    csv: Path | None = None
    images: Path | None = None
    split: str = "all"
    column_types: str | None = None
    checkpoint: Path | None = None
    model: Path | None = None
    device: str = "auto"
    batch_size: int = 64
    num_workers: int = 0
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT


@dataclass(frozen=True)
class IndexAddReport:
    """The ids given to the added images, and how many vectors the index holds now."""

    ids: np.ndarray
    stored: int


def add_to_index(request: IndexAddRequest) -> IndexAddReport:
    """Embed the request's images with the index's model and add them to the index, saved atomically.

    `SearchIndex.add` augments the new vectors as the index's build did (database-side augmentation).

    Raises:
        UserError: the images, their columns or the model cannot be used, or the index was rebuilt with
            another model while the images were embedded.
    """
    from retrieval.core.column_types import column_types_of, parse_column_types
    from retrieval.export.index_encoder import encoder_for_index
    from retrieval.index import SearchIndex
    from retrieval.index.metadata import Metadata
    from retrieval.index.storage import METADATA_FILE, read_manifest, writing
    from retrieval.inference.sources import embed_source, read_source

    model = read_manifest(request.index).model  # checked against the verified load under the lock
    encoder = encoder_for_index(model, request.checkpoint, device=request.device, model_dir=request.model)
    stored = column_types_of(Metadata.read(request.index / METADATA_FILE).table.schema)
    declared = parse_column_types(request.column_types)
    source = read_source(request.csv, request.images, request.split, declared, stored)
    embeddings, rows = embed_source(encoder, source, request.batch_size, request.num_workers)
    with writing(request.index), SearchIndex.edit(request.index, request.lock_timeout) as index:
        if index.manifest.model != model:
            raise UserError(
                f"{request.index} was rebuilt with another model while the images were embedded; run add again"
            )
        ids = index.add(embeddings, rows)
    return IndexAddReport(ids, index.ntotal)
