"""`serve --rerank`: every search is re-ranked the way `index query --rerank` and evaluation re-rank."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from retrieval.core.rerank import parse_rerank
from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.gallery import IndexGallery
from retrieval.serve import create_app


@pytest.mark.parametrize("spec", ["qe:k=3,alpha=1", "kreciprocal:k1=4,k2=2,shortlist=12"])
def test_search_answers_in_the_reranked_order(spec, gallery, serving, serve_limits):
    query = np.random.default_rng(0).normal(size=gallery.embeddings.shape[1]).astype(np.float32)
    query /= np.linalg.norm(query)
    index = SearchIndex.load(gallery.index_dir)
    _, expected = parse_rerank(spec).search(IndexGallery(index), query[None], 5)
    assert expected[0].tolist() != index.search(query, 5)[1][0].tolist()  # re-ranking changes this query's order
    with serving(create_app(gallery.index_dir, device="cpu", limits=serve_limits, rerank=spec)) as url:
        answer = httpx.post(f"{url}/search", json={"vector": query.tolist(), "k": 5}, timeout=30).json()
    assert [result["id"] for result in answer["results"]] == expected[0].tolist()


def test_a_build_time_method_is_refused_before_serving(gallery, serve_limits):
    with pytest.raises(UserError, match="dba re-ranks the stored vectors, not a query"):
        create_app(gallery.index_dir, device="cpu", limits=serve_limits, rerank="dba")
