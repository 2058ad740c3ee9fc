"""`IndexBuildOptions`: every choice of one index build, in one object the build phases read.

What to build (kind, memory budget, FAISS sizes), how to tune it (recall targets), what the stored
vectors are (database-side augmentation), what the manifest records about where they came from
(model, match threshold, source files) and where a large build keeps its working files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrieval.core.match_threshold import MatchThreshold
from retrieval.errors import UserError
from retrieval.index.choice import (
    AUTO,
    DEFAULT_TARGET_RECALL,
    IndexPlan,
    choose_index,
    parse_kind,
    parse_memory,
    plan_index,
)
from retrieval.index.manifest import SourceRecord
from retrieval.index.streaming import ADD_CHUNK
from retrieval.inference.interface import ModelInfo

if TYPE_CHECKING:
    from retrieval.core.rerank import DatabaseAugmentation

__all__ = ["IndexBuildOptions"]


@dataclass(frozen=True)
class IndexBuildOptions:
    """How `SearchIndex.build` and `build_streamed` build an index; checked when made.

    Attributes:
        kind: `auto`, `flat`, `hnsw`, `ivf` or `ivfpq` (see `retrieval.index.choice`).
        max_memory: budget in bytes (or `"4G"`) that `auto` must fit.
        target_recall: tune search parameters to the cheapest ones reaching this 10-recall@10 on
            the held-out queries while 99.9% of (a sample of) stored vectors find themselves first;
            a target no setting reaches is an error.
        default_target_recall: without `target_recall`, approximate kinds (hnsw, ivf, ivfpq) are tuned
            to this target, best effort: the most accurate setting explored when none reaches it (their
            fixed defaults, e.g. ivf's nprobe 16, can return half of the true neighbours). None keeps
            the fixed defaults. The manifest records the target and whether it was given or the default.
        nlist: inverted lists (ivf, ivfpq); default about 4·sqrt(N).
        hnsw_m: HNSW links per node; default 32.
        pq_bytes: ivfpq re-ranking code bytes; default 32 (48 bytes a vector with ids and the fast-scan code).
        database_augmentation: a `dba[:k=K,alpha=A]` spec (`retrieval.core.rerank`): the stored vectors are
            each averaged with their nearest ones (exact kNN over all of them, so an in-memory build
            only); the manifest records it and `SearchIndex.add` augments new vectors the same way.
        model_info: recorded under `manifest["model"]` (model_config, checkpoint_sha256, transform).
        match_threshold: the model's stored match threshold (`Checkpoint.match_threshold`), recorded as
            `manifest["match_threshold"]` for `--min-score stored` (`retrieval.index.min_score`).
        sources: the files the rows came from (path, rows, a file's bytes), recorded as `manifest["sources"]`.
        on_disk: an empty working directory: build an IVF-Flat index whose inverted lists are
            written there in shards of at most half of `max_memory` (default 1 GiB) and merged
            into one memory-mapped file (`retrieval.index.on_disk`), for more vectors than fit
            in memory. `save` links that file into the index directory; the index is read-only.
        refine_directory: a working directory for an ivfpq build's float32 re-ranking vectors: written
            there (`refine.faiss`) as they stream and searched memory-mapped, so that memory holds the
            PQ codes and ids only (`retrieval.index.refine_file`). `save` links the file into the index
            directory; the index is read-only. Other kinds ignore it.
        chunk_rows: rows read, normalized and added at a time by a streamed build.
        progress: show progress bars.

    Raises:
        UserError: an unknown kind, an unreadable memory size or a spec other than `dba`.
    """

    kind: str = "auto"
    max_memory: int | str | None = None
    target_recall: float | None = None
    default_target_recall: float | None = DEFAULT_TARGET_RECALL
    nlist: int | None = None
    hnsw_m: int | None = None
    pq_bytes: int | None = None
    database_augmentation: str | None = None
    model_info: ModelInfo | None = None
    match_threshold: MatchThreshold | None = None
    sources: list[SourceRecord] | None = None
    on_disk: Path | None = None
    refine_directory: Path | None = None
    chunk_rows: int = ADD_CHUNK
    progress: bool = True

    def __post_init__(self) -> None:
        parse_kind(self.kind)
        parse_memory(self.max_memory)
        self.augmentation()

    @property
    def budget(self) -> int | None:
        """`max_memory` in bytes; None: no budget."""
        return parse_memory(self.max_memory)

    def augmentation(self) -> DatabaseAugmentation | None:
        """The database-side augmentation `database_augmentation` names, or None."""
        from retrieval.core.rerank import stored_augmentation

        return stored_augmentation(self.database_augmentation)

    def plan(self, n: int, dim: int) -> IndexPlan:
        """The plan `auto` chooses for N vectors within the budget, or the explicit kind's; `ivf` for lists on disk.

        Raises:
            UserError: lists on disk for another kind than ivf, or a budget nothing fits.
        """
        sizes = {"nlist": self.nlist, "hnsw_m": self.hnsw_m, "pq_bytes": self.pq_bytes}
        requested = parse_kind(self.kind)
        if self.on_disk is not None:
            if requested not in (AUTO, "ivf"):
                raise UserError(
                    f"an on-disk index is of kind 'ivf' (IVF-Flat lists on disk), not {self.kind!r}; use --type ivf"
                )
            return plan_index(n, dim, "ivf", **sizes)
        if requested == AUTO:
            return choose_index(n, dim, self.budget, **sizes)
        return plan_index(n, dim, self.kind, **sizes)

    def tuning_target(self, plan: IndexPlan) -> tuple[float | None, str | None]:
        """The recall target to tune to and where it comes from: `("given" | "default" | None)`.

        Exact kinds have nothing to tune, so a default target does not apply to them (a given one is kept).
        """
        if self.target_recall is not None:
            return self.target_recall, "given"
        if self.default_target_recall is not None and plan.search_parameters:
            return self.default_target_recall, "default"
        return None, None
