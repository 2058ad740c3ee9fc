"""A build in phases: sample, train, add, tune, add the held-out queries, describe.

Two passes over the stream: the first gathers the sampled rows (`sample`), the second adds every
row in chunks and keeps, chunk by chunk, the held-out queries' exact neighbours (`add`). Rows are
numbered 0..N-1 in stream order; those numbers, plus `first_id`, are the ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from retrieval.errors import UserError
from retrieval.index.build.add import add_in_chunks, add_stream, sink_for
from retrieval.index.build.describe import BuildFacts, describe
from retrieval.index.build.options import IndexBuildOptions
from retrieval.index.build.sample import draw_sample
from retrieval.index.build.train import trained_index
from retrieval.index.build.tune import tune_and_measure
from retrieval.index.choice import IndexPlan
from retrieval.index.manifest import IndexManifest
from retrieval.index.metadata import Metadata, MetadataInput
from retrieval.index.on_disk import ShardedLists
from retrieval.index.refine_file import RefineSpill
from retrieval.index.streaming import UnitChunks, VectorStream, unit_rows
from retrieval.index.tuning import TUNED_K

__all__ = ["BuiltIndex", "build_index"]


@dataclass(frozen=True)
class BuiltIndex:
    """A build's FAISS index, metadata and manifest; `refine_file`: ivfpq's mapped re-ranking vectors (read-only)."""

    index: faiss.Index
    metadata: Metadata
    manifest: IndexManifest
    refine_file: Path | None


def build_index(
    stream: VectorStream,
    metadata: MetadataInput,
    options: IndexBuildOptions,
    *,
    tuning_queries: np.ndarray | None = None,
    trained: faiss.Index | None = None,
    first_id: int = 0,
    inputs_were_normalized: bool | None = None,
) -> BuiltIndex:
    """Build, tune and describe an index of `stream`'s rows (see `SearchIndex.build_streamed`).

    Args:
        inputs_were_normalized: recorded in the manifest; `None` records whether every chunk was.

    Raises:
        UserError: bad shapes or values, a trained kind with too few vectors to train, a memory budget
            nothing fits, a recall target no setting reaches, or a stream of another length than it says.
    """
    n, dim = stream.count, stream.dim
    plan = options.plan(n, dim)
    if n < plan.min_training_vectors and trained is None:
        raise UserError(_too_few_message(plan, n))
    table = Metadata.from_rows(np.arange(first_id, first_id + n, dtype=np.int64), metadata)
    hold_out = tuning_queries is None and trained is None
    measuring = tuning_queries is not None or (hold_out and n // 10 > 0)
    target, target_source = options.tuning_target(plan)
    reader = UnitChunks(stream, options.chunk_rows)
    sample = draw_sample(
        reader,
        n,
        dim,
        plan,
        hold_out=hold_out,
        train=plan.trained and trained is None,
        check=measuring and target is not None,
        progress=options.progress,
    )
    queries = sample.held_vectors if tuning_queries is None else unit_rows(tuning_queries, "tuning_queries", dim)[0]

    index = trained_index(plan, dim, sample.training_vectors, trained)
    depth = min(TUNED_K, n - len(sample.held_out))  # below TUNED_K when fewer vectors are stored
    sink = sink_for(index, plan, options)
    truth = add_stream(sink, reader, sample.held_out, queries if measuring else None, depth, options.progress, first_id)
    if isinstance(sink, ShardedLists):
        index = sink.merge()
    elif isinstance(sink, RefineSpill):
        index = sink.finish()

    parameters, measured = dict(plan.search_parameters), None
    if measuring:
        best_effort = options.target_recall is None
        parameters, measured = tune_and_measure(
            index, plan.search_parameters, sample, queries, truth, target, best_effort, first_id
        )
    held_ids = sample.held_out + first_id
    if isinstance(sink, ShardedLists):
        if len(held_ids):
            index = sink.add_and_merge(sample.held_vectors, held_ids)
    elif isinstance(sink, RefineSpill):
        if len(held_ids):
            del index  # unmapped before refine.faiss is mapped again: one mapping's pages resident
            index = sink.add_and_finish(sample.held_vectors, held_ids)
    else:
        add_in_chunks(index, sample.held_vectors, held_ids, options.progress, "adding held-out queries")

    facts = BuildFacts(
        count=n,
        first_id=first_id,
        inputs_were_normalized=reader.were_unit if inputs_were_normalized is None else inputs_were_normalized,
        parameters=parameters,
        target=(target, target_source),
        measured=measured,
        held_out=len(sample.held_out),
        given_queries=tuning_queries is not None,
    )
    refine_file = sink.path if isinstance(sink, RefineSpill) else None
    return BuiltIndex(index, table, describe(index, plan, options, facts), refine_file)


def _too_few_message(plan: IndexPlan, n: int) -> str:
    lists = plan.parameters.get("nlist")
    return (
        f"kind {plan.kind!r} ({plan.factory}) needs at least {plan.min_training_vectors:,} vectors to train "
        f"its centroids (39 per centroid, {lists} lists), got {n:,}; use kind 'flat' or 'hnsw', "
        "a smaller nlist, or more vectors"
    )
