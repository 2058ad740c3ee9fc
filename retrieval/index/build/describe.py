"""The describe phase of a build: the manifest recording what was built, from what, and how it measured."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import faiss

from retrieval import __version__
from retrieval.index.build.options import IndexBuildOptions
from retrieval.index.choice import IndexPlan, parse_kind
from retrieval.index.manifest import IndexManifest, Measured
from retrieval.index.on_disk import lists_file
from retrieval.index.refine_file import refine_file_bytes, without_refine
from retrieval.index.storage import FORMAT, FORMAT_VERSION
from retrieval.index.tuning import Measurement

__all__ = ["BuildFacts", "bytes_per_vector", "describe"]


@dataclass(frozen=True)
class BuildFacts:
    """What a build found out, beyond its options: counts, ids, tuned parameters and the measurement.

    Attributes:
        target: the recall target tuned to and where it came from (`IndexBuildOptions.tuning_target`).
        held_out: how many build rows were held out as queries; `given_queries`: queries were given instead.
    """

    count: int
    first_id: int
    inputs_were_normalized: bool
    parameters: dict[str, int]
    target: tuple[float | None, str | None]
    measured: Measurement | None
    held_out: int
    given_queries: bool


def describe(index: faiss.Index, plan: IndexPlan, options: IndexBuildOptions, facts: BuildFacts) -> IndexManifest:
    """The manifest of a built index (`retrieval.index.storage` adds the file table when it is saved)."""
    target, target_source = facts.target
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "toolkit_version": __version__,
        "faiss_version": faiss.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kind": plan.kind,
        "requested_kind": parse_kind(options.kind),
        "factory": plan.factory,
        "parameters": plan.parameters,
        "max_memory": options.budget,
        "dimension": int(index.d),
        "metric": "inner_product",
        "normalized": True,
        "inputs_were_normalized": facts.inputs_were_normalized,
        "count": facts.count,
        "stored": int(index.ntotal),
        "next_id": facts.first_id + facts.count,
        **({"first_id": facts.first_id} if facts.first_id else {}),
        "removed_ids": [],
        "search_parameters": facts.parameters,
        "target_recall": target,
        "target_recall_source": target_source,
        "measured": _measured(facts, index).as_dict(),
        "model": {} if options.model_info is None else options.model_info.record(),
        "match_threshold": None if options.match_threshold is None else options.match_threshold.to_dict(),
        **(
            {"sources": [source.model_dump(exclude_unset=True) for source in options.sources]}
            if options.sources is not None
            else {}
        ),
        **({"database_augmentation": options.database_augmentation} if options.database_augmentation else {}),
    }
    return IndexManifest.model_validate(manifest)


def bytes_per_vector(index: faiss.Index) -> dict[str, float]:
    """`resident_bytes_per_vector` and `disk_bytes_per_vector` of `index`, over its vectors.

    Resident: what a loaded index holds in memory to search, its `index.faiss`; on-disk inverted
    lists (`lists.ivfdata`) and ivfpq's mapped re-ranking vectors (`refine.faiss`) stay in their
    files, memory-mapped, and only the parts a search touches are read. Disk: all its FAISS files.
    """
    split = without_refine(index)
    resident = _serialized_bytes(index if split is None else split[0])
    disk = resident + (0 if split is None else refine_file_bytes(split[1]))
    lists = lists_file(index)
    if lists is not None:
        disk += lists.stat().st_size
    count = max(int(index.ntotal), 1)
    return {"resident_bytes_per_vector": round(resident / count, 1), "disk_bytes_per_vector": round(disk / count, 1)}


def _serialized_bytes(index: faiss.Index) -> int:
    """The size of `index` as FAISS writes it, counted in FAISS's 1 MiB blocks (never a copy in memory)."""
    size = 0

    def count(block: bytes) -> int:
        nonlocal size
        size += len(block)
        return len(block)

    faiss.write_index(index, faiss.PyCallbackIOWriter(count))  # type: ignore[attr-defined]  # not in FAISS's stubs
    return size


def _measured(facts: BuildFacts, index: faiss.Index) -> Measured:
    if facts.measured is None:
        return Measured()
    held = f"{facts.held_out} build vectors held out while measuring"
    return Measured.model_validate(
        {
            **facts.measured.as_dict(),
            **bytes_per_vector(index),
            "queries_from": "given tuning queries" if facts.given_queries else held,
            "reference": "exact inner-product search over the original vectors",
        }
    )
