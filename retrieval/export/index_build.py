"""Building an index directory, from an `IndexBuildRequest` to an `IndexBuildReport`: what `retrieval index build` runs.

From images (a CSV's rows or a folder's files, less those an exclusion CSV lists) embedded by the chosen
model (`EncoderChoice`: a checkpoint, an export or a timm backbone), or streamed from the embedding
files `retrieval embed` wrote, without a model (all of them, or one shard of a trained index:
`retrieval.index.from_files`). The index is saved under its directory's writer lock and measured: on
vectors held out while building, or, when too few were held out, every stored vector (up to 1,000)
searched for among the others, as `index eval` measures. A shard is measured once merged. What the
request, the paths and the files' headers show is refused before a model loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from retrieval.core.learned_rerank import RerankerManifest, read_reranker
from retrieval.core.rerank import augmentation_at_build
from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice, open_encoder
from retrieval.index.choice import DEFAULT_TARGET_RECALL
from retrieval.index.locking import DEFAULT_LOCK_TIMEOUT, writer_lock
from retrieval.index.storage import writing

if TYPE_CHECKING:
    from retrieval.index import SearchIndex
    from retrieval.index.build import IndexBuildOptions
    from retrieval.index.manifest import IndexManifest, Measured
    from retrieval.inference.interface import ModelInfo
    from retrieval.inference.sources import ImageSource

__all__ = ["IndexBuildReport", "IndexBuildRequest", "build_index"]


@dataclass(frozen=True)
class IndexBuildRequest:
    """The flags of `retrieval index build`, by name; the flags' combination is checked when made.

    Attributes:
        out: the index directory to write (replaced whole by the save).
        encoder: the model that embeds the images; with `embeddings`, only its `checkpoint`, naming the
            checkpoint of files that have no room to record it (`.npy`, plain arrays).
        csv, images: the images to index: a dataset CSV's rows of `split` (all, train, val, test or
            gallery), or every image under a folder (label: its subfolder).
        column_types: declared metadata column types, `NAME=TYPE,...` (`retrieval.core.column_types`).
        exclude: a CSV whose `path` column lists images to leave out (an audit's near_duplicates.csv keeps
            each group's `keep=1` image).
        embeddings: instead of images, the embedding files or part folders to stream; `on_disk` keeps
            IVF-Flat's inverted lists on disk; `trained` and `shard` (K, M) build shard K of M of a
            trained index.
        kind, max_memory: the index kind (`auto` chooses from N, D and the memory budget).
        target_recall: tune search parameters to this 10-recall@10; `none` keeps the kind's fixed
            defaults; None: the default target, best effort.
        rerank: a `dba[:k=K,alpha=A]` spec: database-side augmented vectors are stored (images only).
        reranker: a learned re-ranker's directory (`retrieval reranker`) of the encoder's checkpoint: the index
            stores the vectors its blend was chosen on, its `base` dba or plain ones (instead of `rerank`).
        lock_timeout: seconds to wait for another writer of the directory.
        batch_size, num_workers: how the images are embedded.

    Requests that cannot be built are worded with the flags of `index build`, where users make them.

    Raises:
        UserError: options of one input given with the other, no model or no images for a build from
            images, a shard without embedding files.
    """

    out: Path
    encoder: EncoderChoice = field(default_factory=EncoderChoice)
    csv: Path | None = None
    images: Path | None = None
    split: str = "all"
    column_types: str | None = None
    exclude: Path | None = None
    embeddings: tuple[Path, ...] = ()
    on_disk: bool = False
    trained: Path | None = None
    shard: tuple[int, int] | None = None
    kind: str = "auto"
    max_memory: str | None = None
    target_recall: float | Literal["none"] | None = None
    rerank: str | None = None
    reranker: Path | None = None
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    batch_size: int = 64
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.embeddings:
            self._check_embeddings()
        else:
            self._check_images()

    def _check_embeddings(self) -> None:
        """Refuse what a build from embedding files does not take."""
        if self.column_types:
            raise UserError(
                "--column-types types the columns of --csv/--images; embedding files keep the types embed gave"
            )
        if self.rerank or self.reranker:
            flag = "--rerank dba" if self.rerank else "--reranker"
            raise UserError(f"{flag} needs every vector at once: build from images, not --embeddings")
        if self.exclude:
            raise UserError("--exclude leaves images out of --csv/--images; embedding files are built as they are")
        flags = (
            ("--model", self.encoder.model),
            ("--backbone", self.encoder.backbone),
            ("--csv", self.csv),
            ("--images", self.images),
        )
        given = [flag for flag, value in flags if value]
        if given:
            raise UserError(f"--embeddings builds from vectors already made: drop {', '.join(given)}")

    def _check_images(self) -> None:
        """Refuse a build from images without a model or images, or with a shard's options."""
        if self.trained or self.shard:
            raise UserError("--trained and --shard build shards from embedding files: pass --embeddings PATH...")
        if not self.encoder.chosen:
            raise UserError(
                "index build needs a model (--checkpoint CKPT, --model EXPORT_DIR or --backbone NAME) and --csv FILE "
                "or --images DIR, or --embeddings PATH... (no model)"
            )
        if self.csv is None and self.images is None:
            raise UserError("index build needs the images to index: --csv FILE or --images DIR")
        if self.rerank:
            augmentation_at_build(self.rerank)  # a query-time method or a bad value, before PyTorch loads
        if self.rerank and self.reranker:
            raise UserError("--reranker brings the dba its blend was chosen over: drop --rerank")

    def options(self) -> IndexBuildOptions:
        """The kind, memory budget, tuning targets and stored vectors of the build (`IndexBuildOptions`)."""
        from retrieval.index.build import IndexBuildOptions

        if self.target_recall is None:
            target, default = None, DEFAULT_TARGET_RECALL
        elif self.target_recall == "none":
            target, default = None, None
        else:
            target, default = float(self.target_recall), DEFAULT_TARGET_RECALL
        return IndexBuildOptions(
            kind=self.kind,
            max_memory=self.max_memory or None,
            target_recall=target,
            default_target_recall=default,
            database_augmentation=self.rerank,
        )


@dataclass(frozen=True)
class IndexBuildReport:
    """What was built and how it measured.

    Attributes:
        directory: the index directory written.
        manifest: the saved index's manifest (its kind, factory, search parameters and tuning target).
        vectors: the vectors stored.
        measured: the recall, speed and size measured (empty for a shard, measured once merged).
        images: the images read, unreadable ones included (None: built from embedding files).
        excluded: the images the exclusion CSV left out.
        embedding_files: the embedding inputs streamed (None: built from images).
        first_id: a shard's first id (None: not a shard).
    """

    directory: Path
    manifest: IndexManifest
    vectors: int
    measured: Measured
    images: int | None = None
    excluded: int = 0
    embedding_files: int | None = None
    first_id: int | None = None


def build_index(request: IndexBuildRequest) -> IndexBuildReport:
    """Build the index `request` asks for, save it to `request.out` under its writer lock, and measure it.

    Raises:
        UserError: the images, the exclusion CSV, the model, the embedding files or the directory cannot be
            used (see `IndexBuildRequest`, `read_source`, `open_encoder`, `built_from_files`).
    """
    options = request.options()  # an unknown kind, memory size or --rerank spec before anything is read
    if request.embeddings:
        return _from_embeddings(request, options)
    source, excluded = _images(request)  # the images and the model's presence before the model loads
    reranker = None if request.reranker is None else read_reranker(request.reranker)
    encoder = open_encoder(request.encoder)
    from retrieval.index import SearchIndex
    from retrieval.inference.sources import embed_source

    info = encoder.info()
    options = dataclasses.replace(options, model_info=info, match_threshold=encoder.match_threshold)
    if reranker is not None:  # before the images are embedded
        options = dataclasses.replace(options, database_augmentation=_stored_for(reranker.manifest, info))
    embeddings, rows = embed_source(encoder, source, request.batch_size, request.num_workers)
    index = SearchIndex.build(embeddings, rows, options)
    report = _saved(request, index)
    return dataclasses.replace(report, images=len(source.paths), excluded=excluded)


def _stored_for(manifest: RerankerManifest, info: ModelInfo) -> str | None:
    """The `--rerank` spec of the vectors a re-ranker's blend was chosen on (None: plain ones, also for a re-ranker
    that is not applied, which fits any index), once it is checked to belong to the checkpoint `info` records.

    Raises:
        UserError: the model has no checkpoint, or another one than the re-ranker's.
    """
    sha256 = info.trained_checkpoint
    if not sha256:
        raise UserError("--reranker needs the model it was trained for: --checkpoint CKPT or an export of it")
    manifest.belongs_to(sha256, "the checkpoint this index is built with")
    base = manifest.base_augmentation() if manifest.applied else None
    return None if base is None else base.spec()


def _from_embeddings(request: IndexBuildRequest, options: IndexBuildOptions) -> IndexBuildReport:
    """Stream the embedding files into an index (or a shard of a trained one), save and measure it."""
    from retrieval.index.from_files import built_from_files

    with built_from_files(
        list(request.embeddings),
        request.out,
        options,
        request.encoder.checkpoint,
        request.on_disk,
        request.trained,
        request.shard,
    ) as built:
        report = _saved(request, built.index)  # inside the block: its working files live until it ends
    return dataclasses.replace(report, embedding_files=built.files, first_id=built.first_id if built.shard else None)


def _images(request: IndexBuildRequest) -> tuple[ImageSource, int]:
    """The images to index, less the excluded ones, and how many were excluded; the model checked, not loaded.

    Raises:
        UserError: a model that is not there, an unreadable CSV or folder, no images, or an exclusion of all.
    """
    from retrieval.core.column_types import parse_column_types
    from retrieval.inference.sources import read_source

    request.encoder.check()
    source = read_source(request.csv, request.images, request.split, parse_column_types(request.column_types))
    if request.exclude is None:
        return source, 0
    kept = _without_excluded(source, request.exclude)
    return kept, len(source.paths) - len(kept.paths)


def _without_excluded(source: ImageSource, exclude: Path) -> ImageSource:
    """The images of `source` that `exclude` does not list (`retrieval.data.exclusion`).

    Raises:
        UserError: it lists every image.
    """
    import numpy as np

    from retrieval.data.exclusion import excluded_paths
    from retrieval.inference.sources import ImageSource

    excluded = excluded_paths(exclude)
    kept = np.array([i for i, path in enumerate(source.paths) if path.resolve() not in excluded], dtype=np.int64)
    if len(kept) == 0:
        raise UserError(f"--exclude {exclude} lists every image to index; nothing is left to build from")
    return ImageSource([source.paths[i] for i in kept], source.rows(kept))


def _saved(request: IndexBuildRequest, index: SearchIndex) -> IndexBuildReport:
    """Save a built index to `request.out` under its writer lock, and measure it where the build could not."""
    from retrieval.index.manifest import well_measured

    with writing(request.out), writer_lock(request.out, request.lock_timeout):
        index.save(request.out)
    measured = index.manifest.measured  # a shard's is empty: it is measured once merged
    if index.manifest.trained is None and not well_measured(measured):
        measured = index.evaluate(k=10)  # every stored vector (up to 1,000) searched for among the others
    return IndexBuildReport(request.out, index.manifest, index.ntotal, measured)
