"""Which FAISS index to build: kinds, their factory strings, and the `auto` choice from N, D and memory.

Every kind searches by inner product on unit vectors and keeps stable int64 ids:

- `flat`: exact search, `IDMap2,Flat`; 4·D bytes a vector.
- `hnsw`: graph search, `IDMap2,HNSW{M},Flat`; 4·D + 8·M bytes a vector (the level-0 links).
- `ivf`: inverted lists over about 4·sqrt(N) k-means cells, `IVF{nlist},Flat`; 4·D + 8 bytes a vector.
- `ivfpq`: inverted lists of 4-bit product-quantizer codes (D/8 bytes) scanned with SIMD, then exact
  re-ranking of the shortlist against the full vectors (`RFlat`), `IDMap2,IVF{nlist},PQ{2·pq_bytes}x4fsr,RFlat`.
  Resident memory is pq_bytes + 16 bytes a vector (32 for 128-d) when the index is loaded with
  `mmap=True`: the 4·D bytes of full vectors for re-ranking are then read from the memory-mapped file.

`auto` takes the most accurate kind that fits the memory budget: flat while exact search is
still fast (N <= 20,000), HNSW when it fits, IVF, then IVF-PQ.

`KINDS` is the registry of them (`retrieval.registry.Registry`): each kind's `KindSpec` holds its
plan (factory string, parameters, default search parameters, whether it is trained, bytes a vector),
whether FAISS removes its vectors natively, and when `auto` may take it; `auto` tries them in the
registry's order (the built-ins above, then those registered). The command line's choices, the
manifest's `kind` field and `auto` read it, so a new kind is one module with
`KINDS.add("name", KindSpec(...))` or a `retrieval.index_kinds` entry point naming its `KindSpec`
(`docs/extending.md`; plus the tuning ranges in `retrieval.index.tuning` if it brings a FAISS
structure other than inverted lists, a graph or re-ranking, whose search parameters tuning already knows).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from retrieval.errors import UserError
from retrieval.registry import Registry

__all__ = [
    "AUTO",
    "DEFAULT_TARGET_RECALL",
    "FLAT_MAX_VECTORS",
    "KINDS",
    "TRAINING_VECTORS_PER_CENTROID",
    "IndexPlan",
    "IndexSizes",
    "KindSpec",
    "choose_index",
    "parse_kind",
    "parse_memory",
    "plan_index",
]

DEFAULT_TARGET_RECALL = 0.95  # approximate kinds are tuned to this 10-recall@10 unless the caller says otherwise
FLAT_MAX_VECTORS = 20_000  # up to here exact search is fast enough to need no approximation or tuning
TRAINING_VECTORS_PER_CENTROID = 39  # below this FAISS's k-means warns that its centroids are unreliable
_ID_BYTES = 8  # an int64 id per vector, in the IDMap2 table or the inverted list
_HNSW_M = 32  # links per node
# Candidates kept while linking a new node. FAISS's default 40 caps recall on clustered vectors and needs a
# large efSearch before stored vectors find themselves; 160 builds slower for a higher ceiling at a small
# efSearch (docs/benchmarks.md, "Search index").
_HNSW_EF_CONSTRUCTION = 160


AUTO = "auto"  # the kind that `choose_index` resolves to one of `KINDS` from N, D and the memory budget


def parse_kind(kind: str) -> str:
    """`kind` if it is `auto` or a name of `KINDS`.

    Raises:
        UserError: an unknown name; the message lists the valid ones.
    """
    if kind != AUTO and kind not in KINDS:
        raise UserError(f"unknown index kind {kind!r}; use one of: {', '.join([AUTO, *KINDS.names()])}")
    return kind


@dataclass(frozen=True)
class IndexPlan:
    """A resolved index choice: what to build and what it will cost."""

    kind: str  # a name of KINDS, never auto
    factory: str  # the `faiss.index_factory` string, recorded in the manifest
    parameters: dict[str, int] = field(default_factory=dict)  # nlist, hnsw_m, ef_construction, pq_bytes
    search_parameters: dict[str, int] = field(default_factory=dict)  # defaults before tuning (nprobe, efSearch)
    min_training_vectors: int = 0  # trained kinds refuse fewer vectors than this
    bytes_per_vector: float = 0.0  # estimate, to compare with a memory budget

    @property
    def trained(self) -> bool:
        """Whether the index learns centroids (IVF, PQ) before vectors can be added."""
        return self.min_training_vectors > 0


def parse_memory(text: str | int | None) -> int | None:
    """Bytes from `"4G"`, `"512M"`, `"1.5GiB"`, `"800k"` or a plain integer (powers of 1024).

    `None` means no budget. Raises `UserError` on anything else or on a budget <= 0.
    """
    if text is None or isinstance(text, int):
        if text is not None and text <= 0:
            raise UserError(f"memory budget must be positive, got {text}")
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if match is None:
        raise UserError(f"cannot read memory size {text!r}; write it like 4G, 512M or 2000000")
    value = float(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper() or " ")
    if value < 1:
        raise UserError(f"memory budget must be positive, got {text!r}")
    return int(value)


def default_nlist(n: int) -> int:
    """About 4·sqrt(N) inverted lists, capped so each centroid gets its 39 training vectors."""
    return max(1, min(int(round(4 * math.sqrt(n))), n // TRAINING_VECTORS_PER_CENTROID))


@dataclass(frozen=True)
class IndexSizes:
    """The sizes a caller may set (None: the kind's default from N and D); a kind reads those it has."""

    nlist: int | None = None  # inverted lists (ivf, ivfpq); default about 4·sqrt(N)
    hnsw_m: int | None = None  # links per HNSW node; default 32
    pq_bytes: int | None = None  # ivfpq's 4-bit code bytes (2·pq_bytes sub-quantizers must divide D); default D/8


@dataclass(frozen=True)
class KindSpec:
    """One row of `KINDS`: what the toolkit needs to know about an index kind."""

    plan: Callable[[int, int, IndexSizes], IndexPlan]  # (N, D, sizes) -> factory, parameters, bytes a vector
    native_remove: bool  # FAISS removes its vectors; otherwise removal hides them until `compact`
    in_auto: Callable[[int, int], bool]  # (N, D) -> whether `auto` may choose it


def _flat(n: int, dim: int, sizes: IndexSizes) -> IndexPlan:
    return IndexPlan("flat", "IDMap2,Flat", bytes_per_vector=4.0 * dim + 2 * _ID_BYTES)


def _hnsw(n: int, dim: int, sizes: IndexSizes) -> IndexPlan:
    m = _positive("hnsw_m", sizes.hnsw_m, _HNSW_M)
    return IndexPlan(
        "hnsw",
        f"IDMap2,HNSW{m},Flat",
        parameters={"hnsw_m": m, "ef_construction": _HNSW_EF_CONSTRUCTION},
        search_parameters={"efSearch": 64},
        bytes_per_vector=4.0 * dim + 8.0 * m + 2 * _ID_BYTES,
    )


def _ivf(n: int, dim: int, sizes: IndexSizes) -> IndexPlan:
    lists = _positive("nlist", sizes.nlist, default_nlist(n))
    return IndexPlan(
        "ivf",
        f"IVF{lists},Flat",
        parameters={"nlist": lists},
        search_parameters={"nprobe": min(lists, 16)},
        min_training_vectors=TRAINING_VECTORS_PER_CENTROID * lists,
        bytes_per_vector=4.0 * dim + _ID_BYTES,
    )


def _ivfpq(n: int, dim: int, sizes: IndexSizes) -> IndexPlan:
    lists = _positive("nlist", sizes.nlist, default_nlist(n))
    code_bytes = _positive("pq_bytes", sizes.pq_bytes, _default_pq_bytes(dim))
    quantizers = 2 * code_bytes  # 4-bit codes: two sub-quantizers a byte
    if dim % quantizers:
        raise UserError(f"pq_bytes={code_bytes} needs a dimension divisible by {quantizers}, got {dim}")
    return IndexPlan(
        "ivfpq",
        f"IDMap2,IVF{lists},PQ{quantizers}x4fsr,RFlat",
        parameters={"nlist": lists, "pq_bytes": code_bytes},
        search_parameters={"nprobe": min(lists, 32), "k_factor_rf": 16},
        min_training_vectors=TRAINING_VECTORS_PER_CENTROID * lists,
        bytes_per_vector=code_bytes + 2 * _ID_BYTES,
    )


FLAT = KindSpec(_flat, native_remove=True, in_auto=lambda n, dim: n <= FLAT_MAX_VECTORS)
HNSW = KindSpec(_hnsw, native_remove=False, in_auto=lambda n, dim: True)
IVF = KindSpec(_ivf, native_remove=True, in_auto=lambda n, dim: True)
IVFPQ = KindSpec(_ivfpq, native_remove=False, in_auto=lambda n, dim: dim % 2 == 0)

# Every kind but `auto`, the built-ins most accurate first: the order `auto` tries them in.
KINDS: Registry[KindSpec] = Registry(
    "index kind",
    "retrieval.index_kinds",
    {name: f"{__name__}:{name.upper()}" for name in ("flat", "hnsw", "ivf", "ivfpq")},
    accepts=lambda obj: isinstance(obj, KindSpec),
    expected="a retrieval.index.choice.KindSpec",
    unknown=lambda name, names: f"unknown index kind {name!r}; use one of: {', '.join([AUTO, *names])}",
)


def plan_index(
    n: int,
    dim: int,
    kind: str,
    *,
    nlist: int | None = None,
    hnsw_m: int | None = None,
    pq_bytes: int | None = None,
) -> IndexPlan:
    """The plan for an explicit `kind` (not `auto`), with its parameters defaulted from N and D (`IndexSizes`).

    Args:
        n: number of vectors the index is built from.
        dim: their dimension.
        kind: a name of `KINDS`: `flat`, `hnsw`, `ivf`, `ivfpq` or one registered.
        nlist, hnsw_m, pq_bytes: the sizes of `IndexSizes`; a kind ignores those it does not have.
    """
    if parse_kind(kind) == AUTO:
        raise UserError("kind 'auto' has no fixed plan; call choose_index")
    return KINDS.get(kind).plan(n, dim, IndexSizes(nlist=nlist, hnsw_m=hnsw_m, pq_bytes=pq_bytes))


def choose_index(
    n: int,
    dim: int,
    max_memory: int | None = None,
    *,
    nlist: int | None = None,
    hnsw_m: int | None = None,
    pq_bytes: int | None = None,
) -> IndexPlan:
    """The `auto` choice: the most accurate kind whose estimated size fits `max_memory`.

    Flat while exact search stays fast (N <= `FLAT_MAX_VECTORS`), then HNSW, IVF and IVF-PQ,
    the first whose `bytes_per_vector · N` fits `max_memory` (no budget: flat or HNSW). Kinds
    that need more training vectors than N are skipped.

    Raises:
        UserError: nothing fits the budget, not even IVF-PQ.
    """
    sizes = IndexSizes(nlist=nlist, hnsw_m=hnsw_m, pq_bytes=pq_bytes)
    candidates = [spec.plan(n, dim, sizes) for spec in KINDS.values() if spec.in_auto(n, dim)]
    for plan in candidates:
        fits = max_memory is None or plan.bytes_per_vector * n <= max_memory
        if fits and n >= plan.min_training_vectors:
            return plan
    if n < FLAT_MAX_VECTORS:  # too few vectors to train the compact kinds: exact search is also the smallest
        flat = plan_index(n, dim, "flat")
        if max_memory is None or flat.bytes_per_vector * n <= max_memory:
            return flat
    smallest = candidates[-1].bytes_per_vector * n
    raise UserError(
        f"no index of {n:,} vectors of dimension {dim} fits in {max_memory:,} bytes "
        f"(the smallest, {candidates[-1].kind}, needs about {smallest:,.0f}); raise --max-memory"
    )


def _default_pq_bytes(dim: int) -> int:
    """About D/8 bytes (4 dimensions a 4-bit sub-quantizer), rounded down to a size whose quantizers divide D."""
    fitting = [size for size in range(1, max(dim // 8, 1) + 1) if dim % (2 * size) == 0]
    if not fitting:
        raise UserError(f"ivfpq needs an even dimension, got {dim}; use kind 'ivf' or 'hnsw'")
    return fitting[-1]


def _positive(name: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if int(value) != value or value <= 0:
        raise UserError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
