"""ivfpq's re-ranking vectors in their own file, memory-mapped by FAISS: a streamed build holds only the PQ codes.

`IDMap2,IVF{nlist},PQ{m}x4fsr,RFlat` re-ranks a shortlist of PQ candidates by exact inner products
with the float32 vectors of its refine index (an `IndexFlat`): 4·D bytes a vector, most of the
index. A build that streams its rows (`RefineSpill`) writes those vectors to `refine.faiss` as they
come and keeps only the codes and ids in memory. `refine.faiss` is an ordinary FAISS `IndexFlatIP`
file, which FAISS memory-maps (`IO_FLAG_MMAP_IFC`); `index.faiss` then holds the ids and the IVF-PQ
part (`IndexIDMap` over `IndexIVFPQFastScan`). `joined` puts the two together into
`IDMap2(IndexRefine(IVF-PQ, IndexFlat))`, the structure an in-memory build has, so a search gives
the same ids and scores; a search touches only the shortlisted vectors' pages.

FAISS's `IndexIDMap` constructors take an empty index only, so the wrappers here are made around an
empty placeholder and pointed at the filled index (`_id_mapped`); Python references keep every
part alive (FAISS's own Python wrappers do the same).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import faiss
import numpy as np

__all__ = ["REFINE_FILE", "RefineSpill", "from_index_file", "joined", "refine_file_bytes", "without_refine"]

REFINE_FILE = "refine.faiss"
_LENGTH_BYTES = 8  # FAISS writes a flat index's vectors after their float count, a uint64


class RefineSpill:
    """Adds rows to an ivfpq index's codes in memory and appends their float32 vectors to `refine.faiss`.

    Args:
        index: the trained, empty `IDMap2(IndexRefineFlat(IVF-PQ, IndexFlat))` of the ivfpq plan.
        directory: a working directory; the vectors are written to `directory/refine.faiss`.
    """

    def __init__(self, index: faiss.Index, directory: Path) -> None:
        refine = cast(faiss.IndexRefine, faiss.downcast_index(cast(faiss.IndexIDMap2, index).index))
        self._k_factor = int(refine.k_factor)
        self._base = _taken(refine, "base_index")
        self._adder = faiss.IndexIDMap(self._base)  # ids in order of insertion: refine.faiss's row order
        self.path = directory / REFINE_FILE
        self._dim, self._count = int(index.d), 0
        with open(self.path, "wb") as handle:
            handle.write(_flat_file_header(self._dim, 0))  # rewritten with the count by `finish`

    def add_with_ids(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Encode `vectors` into the IVF-PQ lists and append them to the file, in the same order."""
        self._adder.add_with_ids(vectors, ids)
        with open(self.path, "ab") as handle:
            np.ascontiguousarray(vectors, dtype=np.float32).tofile(handle)
        self._count += len(vectors)

    def finish(self) -> faiss.Index:
        """Complete the file's header and return the joined index, re-ranking from the mapped file."""
        with open(self.path, "r+b") as handle:
            handle.write(_flat_file_header(self._dim, self._count))
        return joined(self._base, faiss.vector_to_array(self._adder.id_map), self.path, self._k_factor)

    def add_and_finish(self, vectors: np.ndarray, ids: np.ndarray) -> faiss.Index:
        """`add_with_ids` then `finish`: rows added after an index was joined (a joined index takes none)."""
        self.add_with_ids(vectors, ids)
        return self.finish()


def joined(base: faiss.Index, ids: np.ndarray, path: Path, k_factor: int) -> faiss.Index:
    """`IDMap2(IndexRefine(base, the IndexFlat of path, memory-mapped))`, labels `ids` (in refine file order)."""
    vectors = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
    if vectors.ntotal != base.ntotal or len(ids) != base.ntotal:
        raise RuntimeError(f"{path} holds {vectors.ntotal} vectors for {base.ntotal} codes and {len(ids)} ids")
    refine = faiss.IndexRefine(base, vectors)
    refine.k_factor = k_factor
    return _id_mapped(faiss.IndexIDMap2, refine, ids)


def without_refine(index: faiss.Index) -> tuple[faiss.Index, faiss.IndexFlatCodes] | None:
    """`(IndexIDMap over the IVF-PQ part, the mapped IndexFlat)` of a `joined` index; None for any other index."""
    if not isinstance(index, faiss.IndexIDMap2):
        return None
    refine = faiss.downcast_index(index.index)
    if not isinstance(refine, faiss.IndexRefine):
        return None
    vectors = faiss.downcast_index(refine.refine_index)
    if not isinstance(vectors, faiss.IndexFlatCodes) or vectors.codes.is_owned:
        return None  # an in-memory refine index: written inside index.faiss as usual
    base = faiss.downcast_index(refine.base_index)
    return _id_mapped(faiss.IndexIDMap, base, faiss.vector_to_array(index.id_map)), vectors


def from_index_file(index: faiss.Index, path: Path) -> faiss.Index:
    """The joined index of what `index.faiss` holds (`IndexIDMap` over IVF-PQ) and the refine file at `path`.

    The re-ranking depth (k_factor) is a search parameter, set from the manifest afterwards.
    """
    ids = faiss.vector_to_array(cast(faiss.IndexIDMap, index).id_map)
    return joined(_taken(index, "index"), ids, path, k_factor=1)


def refine_file_bytes(vectors: faiss.IndexFlatCodes) -> int:
    """The size of the `refine.faiss` of a flat index: FAISS's header and the vectors."""
    return len(_flat_file_header(int(vectors.d), int(vectors.ntotal))) + int(vectors.ntotal) * int(vectors.code_size)


def _taken(owner: Any, field: str) -> faiss.Index:
    """`owner.<field>`, handed from `owner` to Python: it lives as long as a Python reference to it does."""
    inner = faiss.downcast_index(getattr(owner, field))
    owner.own_fields = False
    inner.this.own(True)  # type: ignore[attr-defined]  # SWIG's ownership flag, not in FAISS's stubs
    return inner


def _id_mapped(wrapper: type[faiss.IndexIDMap], inner: faiss.Index, ids: np.ndarray) -> faiss.Index:
    """`wrapper` (`IndexIDMap` or `IndexIDMap2`) over the filled `inner`, labels `ids`.

    FAISS's constructor refuses a non-empty index, so the wrapper is made around an empty one of the
    same dimension and metric, then pointed at `inner`.
    """
    mapped = wrapper(faiss.IndexFlat(inner.d, inner.metric_type))
    mapped.index = inner
    mapped.referenced_objects = [inner]  # type: ignore[attr-defined]  # as FAISS's Python wrappers keep references
    faiss.copy_array_to_vector(np.ascontiguousarray(ids, dtype=np.int64), mapped.id_map)
    mapped.ntotal, mapped.is_trained = inner.ntotal, inner.is_trained
    if isinstance(mapped, faiss.IndexIDMap2):
        mapped.construct_rev_map()
    return mapped


def _flat_file_header(dim: int, count: int) -> bytes:
    """The bytes FAISS writes before the vectors of an `IndexFlatIP` holding `count` D-dim vectors.

    FAISS's serialization of an empty flat index that claims `count` vectors ends with the length of its
    (empty) float array; that length is set to `count · D`.
    """
    flat = faiss.IndexFlatIP(dim)
    flat.ntotal = count
    empty = faiss.serialize_index(flat).tobytes()
    if empty[-_LENGTH_BYTES:] != bytes(_LENGTH_BYTES):
        raise RuntimeError("FAISS's flat index layout changed: its serialization does not end with the array length")
    return empty[:-_LENGTH_BYTES] + np.uint64(count * dim).tobytes()
