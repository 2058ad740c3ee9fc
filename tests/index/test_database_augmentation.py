"""Database-side augmentation belongs to the index: a build records it, and `SearchIndex.add` applies it."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.core.rerank import DatabaseAugmentation, augment_vectors
from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.build import IndexBuildOptions
from retrieval.index.gallery import IndexGallery
from retrieval.index.streaming import VectorStream

SPEC = "dba:k=3,alpha=1"


def test_a_build_with_dba_stores_augmented_vectors_and_records_the_spec(data) -> None:
    vectors, _ = data
    index = SearchIndex.build(vectors, None, IndexBuildOptions(kind="flat", database_augmentation=SPEC, progress=False))
    assert index.manifest.database_augmentation == SPEC
    ids, stored = index.all_vectors()
    np.testing.assert_allclose(stored, augment_vectors(vectors, 3, 1.0)[ids], atol=1e-5)
    assert (
        "database_augmentation" not in SearchIndex.build(vectors[:50], kind="flat", progress=False).manifest.as_dict()
    )


def test_python_add_to_a_dba_index_stores_what_the_cli_add_would(data, tmp_path) -> None:
    # An index as `index build --rerank dba` writes it: augmented vectors, the spec in the manifest.
    vectors, queries = data
    built = SearchIndex.build(augment_vectors(vectors, 3, 1.0), kind="flat", progress=False)
    built.manifest.database_augmentation = SPEC
    built.save(tmp_path / "dba")
    index = SearchIndex.load(tmp_path / "dba")
    expected = DatabaseAugmentation(k=3, alpha=1.0).added(IndexGallery(index), queries[:5])
    ids = index.add(queries[:5])
    np.testing.assert_allclose(index.vectors(ids), expected, atol=1e-5)
    assert not np.allclose(index.vectors(ids), queries[:5], atol=1e-3)  # augmented, not stored as given


def test_dba_is_refused_where_it_cannot_apply(data) -> None:
    vectors, _ = data
    with pytest.raises(UserError, match="qe re-ranks queries, not the stored vectors"):
        IndexBuildOptions(database_augmentation="qe")
    with pytest.raises(UserError, match="needs every vector at once"):
        SearchIndex.build_streamed(VectorStream.of_array(vectors), kind="flat", database_augmentation=SPEC)
